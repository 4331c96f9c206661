"""Slack, for chat: the Web API with a bot token (threads and edits), else incoming webhooks, one
URL per channel (`transport`), the messages laid out as Block Kit (`blocks`).

Its params are the `slack_*` fields of `SinkSettings` (`XIDPIPE_SINKS_SLACK_BOT_TOKEN`, ...), where
their units and defaults are documented; it is configured when a bot token or a webhook is set.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr

from respond.sinks.ports import Destination
from respond.sinks.slack.transport import SlackWebhookTransport, SlackWebTransport

__all__ = ["DESTINATION", "SlackParams", "SlackWebTransport", "SlackWebhookTransport"]


class SlackParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    bot_token: SecretStr | None = None
    base_url: str
    webhooks: dict[str, SecretStr]
    timeout_s: int
    rate_limit_retries: int
    server_error_retries: int


def sink(p: SlackParams) -> SlackWebTransport | SlackWebhookTransport | None:
    """The Web API when a bot token is set (threads and edits), else the webhooks, else None."""
    if p.bot_token:
        return SlackWebTransport(p.bot_token, base_url=p.base_url, timeout_s=p.timeout_s,
                                 rate_limit_retries=p.rate_limit_retries, server_error_retries=p.server_error_retries)
    if p.webhooks:
        return SlackWebhookTransport(p.webhooks, timeout_s=p.timeout_s, rate_limit_retries=p.rate_limit_retries,
                                     server_error_retries=p.server_error_retries)
    return None


DESTINATION = Destination("slack", "chat", SlackParams, sink)
