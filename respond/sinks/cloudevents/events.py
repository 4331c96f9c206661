"""CloudEvents 1.0 over HTTP, structured mode (`application/cloudevents+json`), built and serialized
by the CloudEvents SDK (`cloudevents.core`): one event per paging event, POSTed to a webhook.

Attributes: `specversion` 1.0; `id` the event's stable id (`models.paging.event_id`: a retry carries
the same id, so a consumer deduplicating by `source` + `id` takes it once); `source` the configured
source (a URI reference, `/xidpipe` by default); `type` per event (`TYPES`); `subject` the incident's
id; `time` when it was decided (RFC 3339); `datacontenttype` application/json; `dataschema` the
configured schema URI, when set. `data` follows `data.schema.json` beside this file.

Authentication: with a secret, `X-Xidpipe-Timestamp` (Unix seconds) and `X-Xidpipe-Signature:
sha256=<hex>`, the HMAC-SHA256 of `<timestamp>.<body>` under the secret (the receiver recomputes it
and refuses an old timestamp); with a bearer token, `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudevents.core.bindings.http import to_structured_event
from cloudevents.core.v1.event import CloudEvent
from pydantic import SecretStr

from models.paging import PageKind, PagePolicy
from respond.sinks.http_json import post_json
from respond.sinks.ports import PageEvent

SCHEMA = Path(__file__).with_name("data.schema.json")
TYPES: dict[PageKind, str] = {
    PageKind.OPENED: "io.xidpipe.incident.opened",  # an incident opened (or opened again after its resolution)
    PageKind.CHANGED: "io.xidpipe.incident.changed",  # its title, severity, decision or codes changed
    PageKind.CORDON: "io.xidpipe.incident.cordon",  # a cordon step: cordon, release, drain, GPU quarantine ...
    PageKind.REMEDIATION: "io.xidpipe.incident.remediation",  # a transition of its remediation loop
    PageKind.RESOLVED: "io.xidpipe.incident.resolved",
}
SIGNATURE_HEADER = "X-Xidpipe-Signature"
TIMESTAMP_HEADER = "X-Xidpipe-Timestamp"


def data_of(event: PageEvent) -> dict[str, Any]:
    """The event's `data` (`data.schema.json`)."""
    c = event.content
    links = {k: v for k, v in (("incident", event.link("Incident page")), ("ticket", event.link("Ticket"))) if v}
    step = event.step
    told_step = None if step is None else {
        "key": step.key, "kind": step.kind, "at": step.at.astimezone(UTC).isoformat(), "text": step.text,
        "action": step.action, "outcome": step.outcome}
    return {
        "schema_version": 1, "incident_id": event.incident_id, "alert_key": event.alert_key, "event": str(event.kind),
        "status": event.status, "severity": event.severity.value, "title": c.title, "category": c.category,
        "reason": c.reason, "started_at": event.started_at.astimezone(UTC).isoformat(), "labels": dict(event.labels),
        "links": links, "summary": [{"label": label, "text": text} for label, text in event.summary],
        "what_to_do": list(c.steps),
        "step": told_step,
    }


def cloud_event(event: PageEvent, source: str, dataschema: str | None = None) -> CloudEvent | None:
    """The CloudEvent of one paging event (None for a kind not sent: a resend)."""
    kind = TYPES.get(event.kind)
    if kind is None:
        return None
    attributes: dict[str, Any] = {"specversion": "1.0", "id": event.id, "source": source, "type": kind,
                                  "subject": event.incident_id, "time": event.at.astimezone(UTC),
                                  "datacontenttype": "application/json"}
    if dataschema:
        attributes["dataschema"] = dataschema
    return CloudEvent(attributes, data_of(event))


def structured(event: PageEvent, source: str, dataschema: str | None = None) -> tuple[dict[str, str], bytes] | None:
    """The HTTP headers and body of the event in structured mode (None for a kind not sent)."""
    ce = cloud_event(event, source, dataschema)
    if ce is None:
        return None
    message = to_structured_event(ce)
    return dict(message.headers), message.body


def signature(secret: str, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


class CloudEventsPager:
    name = "cloudevents"

    def __init__(self, url: str, policy: PagePolicy, *, source: str = "/xidpipe", dataschema: str | None = None,
                 secret: SecretStr | None = None, bearer_token: SecretStr | None = None, timeout_s: float = 10.0,
                 clock: Any = None) -> None:
        self.url = url
        self.policy = policy
        self.source = source
        self.dataschema = dataschema
        self.timeout_s = timeout_s
        self._secret = secret
        self._token = bearer_token
        self._clock = clock or (lambda: datetime.now(UTC))

    def headers(self, body: bytes) -> dict[str, str]:
        out: dict[str, str] = {}
        if self._secret is not None:
            ts = str(int(self._clock().timestamp()))
            out[TIMESTAMP_HEADER] = ts
            out[SIGNATURE_HEADER] = signature(self._secret.get_secret_value(), ts, body)
        if self._token is not None:
            out["Authorization"] = f"Bearer {self._token.get_secret_value()}"
        return out

    def send(self, event: PageEvent) -> None:
        message = structured(event, self.source, self.dataschema)
        if message is None:
            return
        headers, body = message
        headers = {**headers, **self.headers(body)}
        secrets = tuple(s.get_secret_value() for s in (self._secret, self._token) if s is not None)
        post_json(self.url, body, what="CloudEvents webhook", timeout_s=self.timeout_s, headers=headers,
                  secrets=secrets)


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA.read_text(encoding="utf-8"))
    return data
