"""The destinations xidpipe ships: Jira for tickets, Slack (bot token or incoming webhooks) for chat,
and the file outbox for both when neither is configured.

Their params come from the `jira_*`, `slack_*` and `outbox_*` fields of `SinkSettings`
(`XIDPIPE_SINKS_JIRA_URL`, ...), where their units and defaults are documented.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, SecretStr

from models.dossier import JiraFlavor
from respond.sinks.jira_tracker import JiraTracker
from respond.sinks.outbox import OutboxChat, OutboxTracker
from respond.sinks.ports import Destination
from respond.sinks.slack_notifier import SlackWebhookTransport, SlackWebTransport


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class JiraParams(_Params):
    url: str | None = None
    user: str | None = None
    api_token: SecretStr | None = None
    timeout_s: float
    flavor: JiraFlavor = "server"


def jira_sink(p: JiraParams) -> JiraTracker | None:
    if not (p.url and p.user and p.api_token):
        return None
    return JiraTracker(p.url, p.user, p.api_token, timeout_s=p.timeout_s, flavor=p.flavor)


class SlackBotParams(_Params):
    bot_token: SecretStr | None = None
    base_url: str
    timeout_s: int
    rate_limit_retries: int
    server_error_retries: int


def slack_bot_sink(p: SlackBotParams) -> SlackWebTransport | None:
    if not p.bot_token:
        return None
    return SlackWebTransport(p.bot_token, base_url=p.base_url, timeout_s=p.timeout_s,
                             rate_limit_retries=p.rate_limit_retries, server_error_retries=p.server_error_retries)


class SlackWebhookParams(_Params):
    webhooks: dict[str, SecretStr]
    timeout_s: int
    rate_limit_retries: int
    server_error_retries: int


def slack_webhook_sink(p: SlackWebhookParams) -> SlackWebhookTransport | None:
    if not p.webhooks:
        return None
    return SlackWebhookTransport(p.webhooks, timeout_s=p.timeout_s, rate_limit_retries=p.rate_limit_retries,
                                 server_error_retries=p.server_error_retries)


class OutboxParams(_Params):
    dir: Path


def outbox_tracker(p: OutboxParams) -> OutboxTracker:
    return OutboxTracker(p.dir)


def outbox_chat(p: OutboxParams) -> OutboxChat:
    return OutboxChat(p.dir)


JIRA = Destination("jira", "tickets", JiraParams, jira_sink)
SLACK_BOT = Destination("slack", "chat", SlackBotParams, slack_bot_sink)  # threads and edits: before webhooks
SLACK_WEBHOOKS = Destination("slack_webhooks", "chat", SlackWebhookParams, slack_webhook_sink, settings_prefix="slack")
OUTBOX_TICKETS = Destination("outbox", "tickets", OutboxParams, outbox_tracker, fallback=True)
OUTBOX_CHAT = Destination("outbox", "chat", OutboxParams, outbox_chat, fallback=True)
