"""The responder's endpoint and request metrics: `/metrics` (`service.metrics.ResponderMetrics`),
`/healthz` (the consume loop turns: it beat within `LOOP_STALL_S`) and `/readyz` (the Kafka consumer
knows its group coordinator, the database answers at this xidpipe's schema).

Every action request consumed is counted by kind, with its lag: the time from its publication (the
Kafka message's timestamp) to its handling.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from service.http import EndpointServer, checks_report, run_checks
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)

LOOP_STALL_S = 60.0  # the consume loop's last turn older than this: not live (a handling that hangs)


def observe_request(metrics: ResponderMetrics, msg: Any, body: dict[str, Any] | None) -> None:
    kind = str(body.get("kind") or "unknown")[:40] if body is not None else "undecodable"
    metrics.actions.labels(kind).inc()
    if getattr(msg, "timestamp", None):
        metrics.action_lag.labels(kind).observe(max(0.0, time.time() - msg.timestamp / 1000.0))


class ResponderEndpoint:
    def __init__(self, host: str, port: int | None, metrics: ResponderMetrics, engine: Any, consumer: Any) -> None:
        self.host, self.port = host, port
        self.metrics = metrics
        self.engine = engine
        self.consumer = consumer
        self.last_beat = time.monotonic()
        self.server: EndpointServer | None = None

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def live(self) -> dict[str, Any]:
        age = time.monotonic() - self.last_beat
        problem = None if age < LOOP_STALL_S else f"consume loop last turned {age:.0f} s ago"
        return run_checks({"consume_loop": lambda: problem})

    def _kafka(self) -> str | None:
        coordinator = getattr(self.consumer, "_coordinator", None)
        if coordinator is None or getattr(coordinator, "coordinator_id", None) is None:
            return "the consumer group's coordinator is unknown (Kafka unreachable or the group forming)"
        return None

    def _database(self) -> str | None:
        from history.database import schema_problem

        return schema_problem(self.engine)

    def start(self) -> ResponderEndpoint:
        if self.port is None:
            return self
        try:
            self.server = EndpointServer(self.host, self.port, self.metrics.registry, live=self.live,
                                         ready=checks_report({"kafka": self._kafka, "database": self._database}))
            self.server.start()
        except OSError as exc:  # the responder runs on; its probes fail and say so
            log.error("metrics and health endpoint not started on %s:%s: %s", self.host, self.port, exc)
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
