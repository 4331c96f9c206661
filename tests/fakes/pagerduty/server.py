"""A PagerDuty Events API v2 stand-in (`POST /v2/enqueue`) on 127.0.0.1, as strict as the API.

It answers as PagerDuty documents: `202 {"status": "success", "message": "Event processed",
"dedup_key": ...}` for an event it takes; `400 {"status": "invalid event", "message": "Event object is
invalid", "errors": [...]}` for one it refuses: a body that is not a JSON object or over 512 KB, a
`routing_key` that is not 32 characters (or, when `routing_keys` is given, not one of them), an
`event_action` other than trigger, acknowledge or resolve, a `dedup_key` over 255 characters or
missing from an acknowledge or resolve; for a trigger, a `payload` without `summary` (at most 1024
characters), `source` or a `severity` of critical, error, warning, info, a `timestamp` that is not
ISO 8601, `links` without `href`. Past `rate_limit` events per `rate_window_s` it answers `429` (a
body of its own, no Retry-After), as the API limits each routing key.

Alerts are kept by dedup_key, as PagerDuty keeps them: a trigger opens one (or, while it is open,
adds a log entry to it), a resolve resolves it, and a trigger after its resolve opens a new one
(`incidents` counts them per key). Faults are scripted through `FakeHTTPServer.inject`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.fakes.jira.fakehttp import FakeHTTPServer, Request, Response

SEVERITIES = ("critical", "error", "warning", "info")
ACTIONS = ("trigger", "acknowledge", "resolve")
MAX_BYTES = 512 * 1024


@dataclass
class PdAlert:
    dedup_key: str
    status: str  # triggered, acknowledged, resolved
    summary: str
    severity: str
    payload: dict[str, Any]
    links: list[dict[str, Any]]
    log: list[dict[str, Any]] = field(default_factory=list)  # every event taken for it, in order


def errors_of(body: Any, routing_keys: frozenset[str]) -> list[str]:
    """Why PagerDuty would refuse the event (empty: it takes it)."""
    if not isinstance(body, dict):
        return ["Event object is not a JSON object"]
    errs: list[str] = []
    key = body.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errs.append("Length of 'routing_key' is incorrect (should be 32 characters)")
    elif routing_keys and key not in routing_keys:
        errs.append("Invalid routing key")
    action = body.get("event_action")
    if action not in ACTIONS:
        errs.append("'event_action' is invalid (must be one of trigger, acknowledge, resolve)")
    dedup = body.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or len(dedup) > 255):
        errs.append("'dedup_key' must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and not dedup:
        errs.append("'dedup_key' is required for acknowledge and resolve events")
    if action == "trigger":
        errs += _payload_errors(body.get("payload"))
        for link in body.get("links") or []:
            if not isinstance(link, dict) or not isinstance(link.get("href"), str):
                errs.append("'links' entries need an 'href'")
    return errs


def _payload_errors(payload: Any) -> list[str]:
    if not isinstance(payload, dict):
        return ["'payload' is missing or not an object"]
    errs = []
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary:
        errs.append("'payload.summary' is missing or blank")
    elif len(summary) > 1024:
        errs.append("'payload.summary' is longer than 1024 characters")
    if not isinstance(payload.get("source"), str) or not payload["source"]:
        errs.append("'payload.source' is missing or blank")
    if payload.get("severity") not in SEVERITIES:
        errs.append("'payload.severity' is invalid (must be one of critical, error, warning, info)")
    stamp = payload.get("timestamp")
    if stamp is not None:
        try:
            datetime.fromisoformat(str(stamp))
        except ValueError:
            errs.append("'payload.timestamp' is not ISO 8601")
    return errs


class FakePagerDuty(FakeHTTPServer):
    def __init__(self, routing_keys: tuple[str, ...] = (), rate_limit: int = 120, rate_window_s: float = 60.0) -> None:
        super().__init__("pagerduty")
        self.routing_keys = frozenset(routing_keys)
        self.rate_limit = rate_limit
        self.rate_window_s = rate_window_s
        self.alerts: dict[str, PdAlert] = {}
        self.incidents: dict[str, int] = {}  # dedup_key -> incidents opened for it
        self.refused: list[tuple[Any, list[str]]] = []
        self._taken: list[float] = []
        self.error_body = lambda status: {"status": "throttle event", "message": "Requests for this service are "
                                          "arriving too quickly"} if status == 429 else {"status": "error"}
        self.route("POST", r"/v2/enqueue", self._enqueue)

    def _enqueue(self, req: Request) -> Response:
        now = time.monotonic()
        with self._lock:
            self._taken = [t for t in self._taken if now - t < self.rate_window_s]
            if len(self._taken) >= self.rate_limit:
                return Response.text(429, "")
            self._taken.append(now)
        if len(req.body) > MAX_BYTES:
            return self._invalid(None, ["Event object is larger than 512 KB"])
        try:
            body = json.loads(req.body)
        except ValueError:
            return self._invalid(None, ["Event object is not valid JSON"])
        errs = errors_of(body, self.routing_keys)
        if errs:
            return self._invalid(body, errs)
        key = body.get("dedup_key") or uuid.uuid4().hex
        with self._lock:
            self._take(key, body)
        return Response.json(202, {"status": "success", "message": "Event processed", "dedup_key": key})

    def _invalid(self, body: Any, errs: list[str]) -> Response:
        with self._lock:
            self.refused.append((body, errs))
        return Response.json(400, {"status": "invalid event", "message": "Event object is invalid", "errors": errs})

    def _take(self, key: str, body: dict[str, Any]) -> None:
        action = body["event_action"]
        alert = self.alerts.get(key)
        if action == "trigger":
            p = body["payload"]
            if alert is None or alert.status == "resolved":
                alert = PdAlert(key, "triggered", p["summary"], p["severity"], p, body.get("links") or [])
                self.alerts[key] = alert
                self.incidents[key] = self.incidents.get(key, 0) + 1
            alert.payload, alert.summary, alert.severity = p, p["summary"], p["severity"]
        elif alert is not None and alert.status != "resolved":  # a resolve or acknowledge of an unknown key is ignored
            alert.status = "resolved" if action == "resolve" else "acknowledged"
        if alert is not None:
            alert.log.append(body)
