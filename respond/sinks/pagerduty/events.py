"""PagerDuty's Events API v2 (`POST /v2/enqueue`): an incident is one alert, its `dedup_key` the
incident's alert key (`models.paging.alert_key`: the incident's id; a reopen after a resolve is a
new key, since PagerDuty opens a new incident for a key triggered after its resolve).

- `opened`, `changed`, a cordon or remediation step of a firing incident: `trigger` (PagerDuty
  deduplicates a trigger on an open alert's key into a log entry of it: the step is in its timeline);
- `resolved`: `resolve`; a step told after the resolution is not sent (a trigger would reopen it).

The payload's severity is the one table's (`models.severity`: critical, error, warning, info, the
names PagerDuty takes); `summary` is the incident's title (at most 1024 characters), `source` the
node, `component` the GPU, `group` the cluster, `class` the fault family; `links` the incident's
page and ticket; `custom_details` the dossier's summary, what to do now and the step told. An event
is at most 512 KB: past that, `custom_details` keeps only the summary's first rows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import SecretStr

from models.paging import PageKind, PagePolicy
from respond.sinks.http_json import post_json
from respond.sinks.ports import PageEvent

SUMMARY_MAX = 1024
DEDUP_KEY_MAX = 255
EVENT_MAX_BYTES = 512 * 1024
DEFAULT_URL = "https://events.pagerduty.com"


def dedup_key(event: PageEvent) -> str:
    """The alert key, or its digest where it is longer than PagerDuty takes."""
    key = event.alert_key
    return key if len(key) <= DEDUP_KEY_MAX else "xidpipe-" + hashlib.sha256(key.encode()).hexdigest()


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def custom_details(event: PageEvent) -> dict[str, Any]:
    out: dict[str, Any] = {label: text for label, text in event.summary}
    if event.content.steps:
        out["what to do now"] = list(event.content.steps)
    if event.step is not None:
        out["step"] = event.step.text
    out["severity"] = event.severity.value
    out["event"] = str(event.kind)
    return out


def pd_event(event: PageEvent, routing_key: str) -> dict[str, Any] | None:
    """The Events API v2 body of one event, or None when it is not sent (a step after the resolution)."""
    if event.kind == PageKind.RESOLVED:
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup_key(event)}
    if not event.firing:
        return None
    labels = event.labels
    payload: dict[str, Any] = {
        "summary": _clip(event.content.title, SUMMARY_MAX), "source": labels.get("node", event.incident_id),
        "severity": event.severity.value, "timestamp": event.at.isoformat(), "class": labels.get("family", ""),
        "group": labels.get("cluster", ""), "component": labels.get("gpu", ""), "custom_details": custom_details(event)}
    body: dict[str, Any] = {"routing_key": routing_key, "event_action": "trigger", "dedup_key": dedup_key(event),
            "client": "xidpipe", "payload": {k: v for k, v in payload.items() if v != ""},
            "links": [{"href": url, "text": label} for label, url in event.content.links]}
    page = event.link("Incident page")
    if page:
        body["client_url"] = page
    if len(json.dumps(body).encode()) > EVENT_MAX_BYTES:
        payload["custom_details"] = {label: _clip(text, 1024) for label, text in event.summary[:8]}
        body["payload"] = {k: v for k, v in payload.items() if v != ""}
    return body


class PagerDutyPager:
    name = "pagerduty"

    def __init__(self, routing_key: SecretStr, policy: PagePolicy, *, url: str = DEFAULT_URL,
                 timeout_s: float = 10.0) -> None:
        self._key = routing_key
        self.policy = policy
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def send(self, event: PageEvent) -> None:
        body = pd_event(event, self._key.get_secret_value())
        if body is None:
            return
        post_json(f"{self.url}/v2/enqueue", json.dumps(body).encode(), what="PagerDuty Events API",
                  timeout_s=self.timeout_s, secrets=(self._key.get_secret_value(),))
