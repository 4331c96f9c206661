"""The Slack adapters of the `ChatTransport` port, on slack-sdk; each renders the notifier's
messages as Block Kit (`blocks.render`).

- `SlackWebTransport`: the Web API with a bot token (`WebClient(base_url=...)`):
  `chat.postMessage` (with `thread_ts` for thread replies), `chat.update` of the root message, and
  `conversations.history` / `conversations.replies` to find a message posted before a timeout
  left its fate unknown (each message carries its key in Slack message metadata).
- `SlackWebhookTransport`: incoming webhooks, one URL per channel (no threads, no edits).

Retries inside slack-sdk: `RateLimitErrorRetryHandler` (429, honouring Retry-After),
`ServerErrorRetryHandler` (5xx) and `ConnectionErrorRetryHandler` (connection refused or reset,
never a read timeout: the request may have been carried out). What is still failing after that
is raised as `TemporaryError` / `AmbiguousError` / `PermanentError` for the notifier to record.
The bot token and webhook URLs are secrets: they never appear in errors or logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from http.client import HTTPException
from typing import Any, TypeVar
from urllib.error import URLError

from pydantic import SecretStr
from slack_sdk import WebClient, WebhookClient
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.handler import RetryHandler

from models.chat_message import ChatMessage, GroupMessage
from respond.errors import ActionError, AmbiguousError, PermanentError, TemporaryError, scrub
from respond.sinks.ports import Posted
from respond.sinks.slack.blocks import render

log = logging.getLogger(__name__)
# slack-sdk's webhook client logs the request URL at DEBUG, and a webhook URL is a secret: its own
# logger never goes below INFO.
_webhook_log = logging.getLogger(f"{__name__}.webhook")
_webhook_log.setLevel(logging.INFO)
T = TypeVar("T")

METADATA_EVENT = "xidpipe_notification"
_TRANSIENT_ERRORS = frozenset({"ratelimited", "rate_limited", "fatal_error", "internal_error", "service_unavailable",
                               "request_timeout", "team_added_to_org"})


def retry_handlers(rate_limit_retries: int = 3, server_error_retries: int = 2) -> list[RetryHandler]:
    return [ConnectionErrorRetryHandler(max_retry_count=1),
            RateLimitErrorRetryHandler(max_retry_count=rate_limit_retries),
            ServerErrorRetryHandler(max_retry_count=server_error_retries)]


def _retry_after(headers: Mapping[str, Any] | None) -> float | None:
    for k, v in (headers or {}).items():
        if k.lower() == "retry-after":
            value = v[0] if isinstance(v, list) else v
            try:
                return float(value)
            except (TypeError, ValueError):
                return None
    return None


class SlackWebTransport:
    name = "web"
    threads = True

    def __init__(self, token: SecretStr, *, base_url: str = "https://slack.com/api/", timeout_s: int = 10,
                 rate_limit_retries: int = 3, server_error_retries: int = 2, history_limit: int = 50) -> None:
        self._token = token
        self._timeout = timeout_s
        self._history_limit = history_limit
        self._client = WebClient(token=token.get_secret_value(), base_url=base_url, timeout=timeout_s,
                                 retry_handlers=retry_handlers(rate_limit_retries, server_error_retries))

    def __repr__(self) -> str:
        return "SlackWebTransport()"

    def _call(self, what: str, fn: Callable[[WebClient], T]) -> T:
        secrets = (self._token.get_secret_value(),)
        try:
            return fn(self._client)
        except SlackApiError as exc:
            status = exc.response.status_code
            error = str(exc.response.get("error") or "") if isinstance(exc.response.data, dict) else ""
            message = scrub(f"Slack answered HTTP {status} to {what}: {error or 'no error code'}", secrets)
            if status == 429 or status >= 500 or error in _TRANSIENT_ERRORS:
                raise TemporaryError(message, status, _retry_after(exc.response.headers)) from None
            raise PermanentError(message, status) from None
        except TimeoutError:
            raise AmbiguousError(f"Slack did not answer {what} within {self._timeout} s") from None
        except (URLError, HTTPException, ConnectionError, SlackRequestError) as exc:
            raise TemporaryError(scrub(f"Slack unreachable during {what}: {type(exc).__name__}", secrets)) from None

    def post(self, channel: str, message: ChatMessage, key: str, thread_ts: str | None = None) -> Posted:
        meta = {"event_type": METADATA_EVENT, "event_payload": {"key": key}}
        body = render(message)
        resp = self._call(f"chat.postMessage to {channel}", lambda c: c.chat_postMessage(
            channel=channel, text=body["text"], blocks=body["blocks"], thread_ts=thread_ts,
            metadata=meta, unfurl_links=False))
        return Posted(str(resp["channel"]), str(resp["ts"]))

    def update(self, channel: str, ts: str, message: GroupMessage, key: str) -> None:
        meta = {"event_type": METADATA_EVENT, "event_payload": {"key": key}}
        body = render(message)
        self._call(f"chat.update in {channel}", lambda c: c.chat_update(
            channel=channel, ts=ts, text=body["text"], blocks=body["blocks"], metadata=meta))

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        if thread_ts is None:
            resp = self._call(f"conversations.history of {channel}", lambda c: c.conversations_history(
                channel=channel, limit=self._history_limit, include_all_metadata=True))
        else:
            resp = self._call(f"conversations.replies in {channel}", lambda c: c.conversations_replies(
                channel=channel, ts=thread_ts, limit=self._history_limit, include_all_metadata=True))
        for m in resp.get("messages") or []:
            payload = (m.get("metadata") or {}).get("event_payload") or {}
            if payload.get("key") == key:
                return Posted(channel, str(m["ts"]))
        return None


class SlackWebhookTransport:
    """Incoming webhooks: `urls` maps a channel to its webhook URL (`"*"`: any other channel)."""

    name = "webhook"
    threads = False

    def __init__(self, urls: Mapping[str, SecretStr], *, timeout_s: int = 10, rate_limit_retries: int = 3,
                 server_error_retries: int = 2) -> None:
        self._urls = dict(urls)
        self._timeout = timeout_s
        self._handlers = retry_handlers(rate_limit_retries, server_error_retries)

    def __repr__(self) -> str:
        return f"SlackWebhookTransport(channels={sorted(self._urls)})"

    def post(self, channel: str, message: ChatMessage, key: str, thread_ts: str | None = None) -> Posted:
        url = self._urls.get(channel) or self._urls.get("*")
        if url is None:
            raise PermanentError(f"no incoming webhook configured for {channel}")
        secret = url.get_secret_value()
        client = WebhookClient(secret, timeout=self._timeout, retry_handlers=self._handlers, logger=_webhook_log)
        payload = render(message)
        try:
            resp = client.send(text=payload["text"], blocks=payload["blocks"])
        except TimeoutError:
            raise AmbiguousError(f"the webhook of {channel} did not answer within {self._timeout} s") from None
        except (URLError, HTTPException, ConnectionError) as exc:
            raise TemporaryError(f"the webhook of {channel} is unreachable: {type(exc).__name__}") from None
        if resp.status_code == 200:
            return Posted(channel, None)
        body = scrub(str(resp.body or "")[:200], (secret,))
        message_text = f"the webhook of {channel} answered HTTP {resp.status_code}: {body or 'no body'}"
        if resp.status_code == 429 or resp.status_code >= 500:
            raise TemporaryError(message_text, resp.status_code, _retry_after(resp.headers))
        raise PermanentError(message_text, resp.status_code)

    def update(self, channel: str, ts: str, message: GroupMessage, key: str) -> None:
        raise ActionError("incoming webhooks cannot edit a message")

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        return None  # a webhook cannot read the channel
