"""Pages in the outbox: every paging event written as the PagerDuty Events API v2 and a CloudEvents
webhook would get it (the routing key, a secret, left out), one file per event:

    var/outbox/pagerduty/<alert key>/<kind>-<event id>.json     the Events API v2 body (trigger, resolve)
    var/outbox/cloudevents/<alert key>/<kind>-<event id>.json   the CloudEvent, structured mode

The event id is stable (`models.paging.event_id`), so writing an event again overwrites its file.
"""

from __future__ import annotations

import json
from pathlib import Path

from models.paging import PagePolicy
from respond.sinks.cloudevents.events import structured
from respond.sinks.outbox.files import json_bytes, safe_name, write_atomic
from respond.sinks.pagerduty.events import pd_event
from respond.sinks.ports import PageEvent

SOURCE = "/xidpipe"


class OutboxPager:
    name = "outbox"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.policy = PagePolicy()

    def _path(self, kind: str, event: PageEvent) -> Path:
        return self.root / kind / safe_name(event.alert_key) / f"{event.kind}-{event.id[:16]}.json"

    def send(self, event: PageEvent) -> None:
        body = pd_event(event, routing_key="")
        if body is not None:
            body.pop("routing_key")
            write_atomic(self._path("pagerduty", event), json_bytes(body))
        message = structured(event, SOURCE)
        if message is not None:
            write_atomic(self._path("cloudevents", event), json_bytes(json.loads(message[1])))
