"""A CloudEvents webhook receiver on 127.0.0.1 (`POST /events`), validating every request by the
rules of CloudEvents 1.0 and its HTTP binding in structured mode, and the request's authentication.

An event it takes answers `202`; one it refuses `400` with the reasons (`401` for a missing or wrong
signature or token). The rules: the content type `application/cloudevents+json`; a JSON object with
the required attributes `id`, `source`, `specversion` and `type`, non-empty strings, `specversion`
"1.0"; `source` a URI reference; `time`, when present, an RFC 3339 timestamp; `datacontenttype`,
when present, a media type (`application/json` for JSON data); attribute names of lower-case
letters and digits, at most 20 characters; `data` valid against `data_schema` when one is given.
An event whose `source` + `id` it took before is a duplicate: answered 202 and counted in
`duplicates`, not taken again, as the spec asks of consumers.

The HMAC check recomputes `sha256=` HMAC-SHA256 of `<X-Xidpipe-Timestamp>.<body>` and refuses a
timestamp older than `max_age_s`. Faults are scripted through `FakeHTTPServer.inject`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Any

import jsonschema_rs

from tests.fakes.jira.fakehttp import FakeHTTPServer, Request, Response

REQUIRED = ("id", "source", "specversion", "type")
CONTENT_TYPE = "application/cloudevents+json"
# RFC 3339 date-time (section 5.6): full-date "T" full-time, with a Z or a numeric offset.
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
ATTRIBUTE_NAME = re.compile(r"^[a-z0-9]{1,20}$")
MEDIA_TYPE = re.compile(r"^[\w.+-]+/[\w.+-]+(\s*;.*)?$")
URI_REFERENCE = re.compile(r"^[^\s]+$")


def spec_errors(event: Any, data_schema: dict[str, Any] | None = None) -> list[str]:
    """Why the event breaks CloudEvents 1.0 (or the data schema); empty when it does not."""
    if not isinstance(event, dict):
        return ["a structured-mode event is a JSON object"]
    errs = [f"required attribute {name!r} is missing or empty" for name in REQUIRED
            if not isinstance(event.get(name), str) or not event[name]]
    if event.get("specversion") not in (None, "1.0"):
        errs.append(f"specversion {event.get('specversion')!r} is not 1.0")
    if isinstance(event.get("source"), str) and not URI_REFERENCE.match(event["source"]):
        errs.append("source is not a URI reference")
    if "time" in event and not (isinstance(event["time"], str) and RFC3339.match(event["time"])):
        errs.append(f"time {event['time']!r} is not RFC 3339")
    content_type = event.get("datacontenttype")
    if content_type is not None and not (isinstance(content_type, str) and MEDIA_TYPE.match(content_type)):
        errs.append(f"datacontenttype {content_type!r} is not a media type")
    if "data" in event and content_type not in (None, "application/json") and not isinstance(event["data"], str):
        errs.append("JSON data needs datacontenttype application/json")
    errs += [f"attribute name {name!r} is not lower-case letters and digits (at most 20)"
             for name in event if name not in ("data", "data_base64") and not ATTRIBUTE_NAME.match(name)]
    if data_schema is not None and "data" in event:
        validator = jsonschema_rs.validator_for(data_schema)
        errs += [f"data{'/'.join(str(p) for p in e.instance_path)}: {e.message[:200]}"
                 for e in list(validator.iter_errors(event["data"]))[:5]]
    return errs


class CloudEventsReceiver(FakeHTTPServer):
    def __init__(self, *, secret: str | None = None, bearer_token: str | None = None,
                 data_schema: dict[str, Any] | None = None, max_age_s: float = 300.0) -> None:
        super().__init__("cloudevents")
        self.secret = secret
        self.bearer_token = bearer_token
        self.data_schema = data_schema
        self.max_age_s = max_age_s
        self.events: list[dict[str, Any]] = []  # taken, in order
        self.duplicates = 0
        self.refused: list[tuple[int, list[str]]] = []
        self._seen: set[tuple[str, str]] = set()
        self.route("POST", r"/events", self._take)

    @property
    def endpoint(self) -> str:
        return f"{self.url}/events"

    def _take(self, req: Request) -> Response:
        denied = self._auth_errors(req)
        if denied:
            return self._refuse(401, denied)
        if req.headers.get("content-type", "").split(";")[0].strip() != CONTENT_TYPE:
            return self._refuse(400, [f"structured mode needs Content-Type {CONTENT_TYPE}"])
        try:
            event = json.loads(req.body)
        except ValueError:
            return self._refuse(400, ["the body is not JSON"])
        errs = spec_errors(event, self.data_schema)
        if errs:
            return self._refuse(400, errs)
        with self._lock:
            key = (event["source"], event["id"])
            if key in self._seen:
                self.duplicates += 1
            else:
                self._seen.add(key)
                self.events.append(event)
        return Response(202)

    def _auth_errors(self, req: Request) -> list[str]:
        errs = []
        if self.bearer_token is not None and req.headers.get("authorization") != f"Bearer {self.bearer_token}":
            errs.append("missing or wrong bearer token")
        if self.secret is not None:
            ts = req.headers.get("x-xidpipe-timestamp", "")
            want = "sha256=" + hmac.new(self.secret.encode(), ts.encode() + b"." + req.body,
                                        hashlib.sha256).hexdigest()
            if not hmac.compare_digest(req.headers.get("x-xidpipe-signature", ""), want):
                errs.append("missing or wrong signature")
            elif not ts.isdigit() or abs(time.time() - int(ts)) > self.max_age_s:
                errs.append("timestamp too old")
        return errs

    def _refuse(self, status: int, errs: list[str]) -> Response:
        with self._lock:
            self.refused.append((status, errs))
        return Response.json(status, {"errors": errs})
