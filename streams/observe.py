"""The stream worker's metrics (`service.metrics.WorkerMetrics`) and its endpoint: `/metrics`,
`/healthz` (the event loop turns: its heartbeat timer ran within `LOOP_STALL_S`) and `/readyz` (the
Kafka consumer is in its group and not rebalancing, the database answers at this xidpipe's schema,
and the last store transaction did not find it unavailable).

The pipeline (`streams.app`) reports what it consumed, stored and dead-lettered; the heartbeat
timer also reads the consumer's lag per assigned partition: its high watermark minus the committed
offset (the offset to read next), so a lag of 0 means every message was stored and committed.
The incidents it tells give the reliability histograms: a hardware incident's time to resolve when it
resolves, and the time since its node's previous one when it opens.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from models.dead_letter import DeadLetter
from models.reliability import started_at, time_to_resolve
from service.http import EndpointServer, checks_report, run_checks
from service.metrics import WorkerMetrics
from streams.settings import WorkerSettings
from streams.store import BatchResult

log = logging.getLogger(__name__)

LOOP_STALL_S = 30.0  # the event loop's heartbeat older than this: not live (the kubelet restarts the worker)
HEARTBEAT_S = 2.0  # how often the heartbeat runs and the lag is read


class WorkerObserver:
    def __init__(self, app: Any, settings: WorkerSettings, metrics: WorkerMetrics | None = None) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics or WorkerMetrics()
        self.server: EndpointServer | None = None
        self.beat = time.monotonic()
        self.store_problem: str | None = None  # the last store call's database failure, until one succeeds
        self._engine: Any = None
        self._lag_series: set[tuple[str, str]] = set()
        self._last_start: dict[str, datetime] = {}  # per node, its latest hardware incident's first fault

    # -- what the pipeline reports ------------------------------------------------------------------

    def consumed(self, topic: str) -> None:
        self.metrics.messages.labels(topic).inc()

    def batch(self, messages: int, seconds: float, result: BatchResult) -> None:
        if messages:
            self.metrics.batch_size.observe(messages)
            self.metrics.batch_seconds.observe(seconds)
        self.stored(result)

    def stored(self, result: BatchResult) -> None:
        """A committed transaction: its new faults, their latency, the incidents it opened."""
        self.store_problem = None
        now = time.time()
        for category, event_at in result.fault_times:
            self.metrics.fault_events.labels(category).inc()
            self.metrics.xid_to_incident.observe(max(0.0, now - event_at))
        for o in result.outgoing:
            if o.stream != "incidents":
                continue
            incident = o.payload.get("incident") or {}
            if o.payload.get("change") == "opened":
                self.metrics.incidents_opened.labels(str(incident.get("component") or "unknown"),
                                                     str(incident.get("category") or "unknown")).inc()
            if o.payload.get("change") in ("opened", "reopened"):  # reopened: a new incident after a resolved one
                self.opened(incident)
            elif o.payload.get("change") == "resolved" and (spent := time_to_resolve(incident)) is not None:
                self.metrics.time_to_resolve.observe(spent)
                self.metrics.time_to_resolve_by_node.labels(str(incident.get("node"))).observe(spent)

    def opened(self, incident: dict[str, Any]) -> None:
        """The time since the node's previous hardware incident began, as far as this worker saw it (a
        node's records stay on one partition: its worker sees each of its incidents open)."""
        start, node = started_at(incident), str(incident.get("node"))
        if start is None:
            return
        last = self._last_start.get(node)
        if last is not None and start > last:
            self.metrics.time_between.observe((start - last).total_seconds())
            self.metrics.time_between_by_node.labels(node).observe((start - last).total_seconds())
        if last is None or start > last:
            self._last_start[node] = start

    def store_failed(self, kind: str, problem: str) -> None:
        self.metrics.database_errors.labels(kind).inc()
        if kind == "unavailable":
            self.store_problem = problem

    def dead_letter(self, dl: DeadLetter) -> None:
        self.metrics.dead_letters.labels(dl.topic, dl.reason).inc()

    # -- the heartbeat and the lag ----------------------------------------------------------------

    async def heartbeat(self) -> None:
        self.beat = time.monotonic()
        try:
            self.read_lag()
        except Exception:  # a consumer between states: the next beat reads it again
            log.debug("consumer lag not readable", exc_info=True)

    def read_lag(self) -> None:
        consumer = getattr(self.app, "_consumer", None)
        if consumer is None:
            return
        seen: set[tuple[str, str]] = set()
        committed = consumer._committed_offset
        for tp in list(consumer.assignment()):
            high = consumer.highwater(tp)
            if high is None:
                continue
            done = committed.get(tp)
            key = (tp.topic, str(tp.partition))
            self.metrics.consumer_lag.labels(*key).set(max(0, int(high) - int(done or 0)))
            seen.add(key)
        for key in self._lag_series - seen:  # partitions revoked: no stale lag
            self.metrics.consumer_lag.remove(*key)
        self._lag_series = seen

    # -- the endpoint -----------------------------------------------------------------------------

    def live(self) -> dict[str, Any]:
        age = time.monotonic() - self.beat
        problem = None if age < LOOP_STALL_S else f"event loop heartbeat {age:.0f} s old"
        return run_checks({"event_loop": lambda: problem})

    def _kafka(self) -> str | None:
        consumer = getattr(self.app, "_consumer", None)
        if consumer is None:
            return "consumer not started"
        if self.app.rebalancing:
            return "rebalancing"
        return None

    def _database(self) -> str | None:
        from history.database import schema_problem
        from history.engine import make_engine

        if self.store_problem is not None:
            return self.store_problem
        if self._engine is None:
            self._engine = make_engine(self.settings.database_url)
        return schema_problem(self._engine)

    async def serve(self) -> None:
        """Start the endpoint (a Faust task: it runs once the worker starts)."""
        if self.settings.metrics_port is None or self.server is not None:
            return
        try:
            self.server = EndpointServer(
                self.settings.metrics_host, self.settings.metrics_port, self.metrics.registry, live=self.live,
                ready=checks_report({"kafka": self._kafka, "database": self._database})).start()
        except OSError as exc:  # the worker runs on; its probes fail and say so
            log.error("metrics and health endpoint not started on %s:%s: %s", self.settings.metrics_host,
                      self.settings.metrics_port, exc)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._engine is not None:
            self._engine.dispose()
