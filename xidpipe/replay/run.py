"""Run a recorded cluster through the stream worker's engine in one process, without Kafka.

The records (`xidpipe.replay.records`) go through what the worker's intake runs for each message
(`streams.items.ItemMapper`: one kernel-log parser per node) and into `streams.store.Store` in batches,
one transaction each, on a database of the replay's own. The action requests the store writes to
its outbox are what a responder would receive: each cordon candidate is decided at once
(`xidpipe.replay.cordons`), and the ticket and chat requests at the end, each ticket as of when its
incident opened, in event time (`xidpipe.replay.sinks`). The store resolves incidents in event time
as the worker does (`streams.event_clock`); there is no arrival-time sweep in a replay.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.cordon_inputs import cordon_request
from history.incident_rows import all_incidents
from history.remediation_inputs import loop_inputs
from history.tables import Incident
from models.cordon_policy import CordonPolicy
from models.node_records import NodeRecord
from models.stream_policy import PipelinePolicy
from models.wire import topic_for
from respond.sinks.settings import SinkSettings
from streams.items import Item, ItemMapper
from streams.outbox import Outgoing
from streams.store import Store
from xidpipe.replay.cordons import DryRunCluster
from xidpipe.replay.layout import ReplayInputError, open_cluster_dir
from xidpipe.replay.records import ClusterRecords
from xidpipe.replay.sinks import SinkOutcomes, sink_outcomes

log = logging.getLogger(__name__)

BATCH_ITEMS = 2000  # items per store transaction: the store's fastest batch size


@dataclass(slots=True)
class ReplayStats:
    nodes: int = 0
    lines_read: int = 0
    lines_kept: int = 0
    records: int = 0
    items: int = 0
    batches: int = 0
    unmapped: int = 0  # records the pure code could not map (the worker dead-letters them)
    seconds: float = 0.0


@dataclass(slots=True)
class ReplayResult:
    incidents: list[dict[str, Any]]
    cluster: DryRunCluster
    sinks: SinkOutcomes
    stats: ReplayStats
    database_url: str | None = None  # kept only when the caller named the database

    def to_dict(self) -> dict[str, Any]:
        breaker = self.cluster.breaker
        return {
            "incidents": self.incidents,
            "cordons": [{k: v for k, v in c.to_dict().items() if k != "outcome"} for c in self.cluster.cordons()],
            "cordon_decisions": [v.to_dict() for v in self.cluster.verdicts],
            "breaker": {"tripped": breaker.tripped, "tripped_at": breaker.tripped_at.isoformat()
                        if breaker.tripped_at else None, "reason": breaker.reason or None},
            "tickets": self.sinks.tickets,
            "ticket_updates": self.sinks.ticket_updates,
            "messages": self.sinks.messages,
            "stats": {"nodes": self.stats.nodes, "lines_read": self.stats.lines_read,
                      "lines_kept": self.stats.lines_kept, "records": self.stats.records, "items": self.stats.items,
                      "batches": self.stats.batches, "unmapped": self.stats.unmapped,
                      "seconds": round(self.stats.seconds, 3)},
        }


def incident_view(row: dict[str, Any]) -> dict[str, Any]:
    """An incident row as replay prints it (rows merged into another incident are no incidents of their own)."""
    return {
        "id": row["incident_id"], "component": row.get("component") or "gpu",
        "component_id": row.get("component_id"), "node": row["node"], "gpu_uuid": row.get("gpu_uuid"),
        "pci": row.get("pci"), "serial": row.get("serial"), "family": row["family"],
        "classification": row["category"], "codes": list(row.get("codes") or []), "count": row["count"],
        "first_seen": row.get("first_seen"), "last_seen": row.get("last_seen"), "pods": list(row.get("pods") or []),
        "processes": list(row.get("processes") or []), "reason": row["reason"], "status": row["status"],
        "rule": row.get("rule"), "fingerprint": row["fingerprint"],
        # NVIDIA's action (the decisive code's), NVIDIA's current instruction from Xid 154, the jobs the fault killed
        "immediate_action": row.get("immediate_action"), "recovery_action": row.get("recovery_action"),
        "affected": list(row.get("affected") or []),
    }


@dataclass(slots=True)
class _Requests:
    """The action requests of the store's outbox, by kind."""

    tickets: set[str] = field(default_factory=set)
    messages: set[str] = field(default_factory=set)


class _Feeder:
    def __init__(self, store: Store, cluster: DryRunCluster, batch_items: int) -> None:
        self.store = store
        self.cluster = cluster
        self.batch_items = batch_items
        self.mapper = ItemMapper(policy=store.policy)
        self.pending: list[Item] = []
        self.requests = _Requests()
        self.stats = ReplayStats()

    def add(self, rec: NodeRecord) -> None:
        self.stats.records += 1
        try:
            items = self.mapper.items(rec, topic_for(rec))
        except Exception:  # as the worker's intake: keep going, say which record
            log.exception("record %s of %s could not be mapped", rec.record_id, rec.node)
            self.stats.unmapped += 1
            return
        self.pending.extend(items)
        if len(self.pending) >= self.batch_items:
            self.flush()

    def finish(self) -> None:
        self.pending.extend(self.mapper.flush_all())
        self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        items, self.pending = self.pending, []
        self.stats.items += len(items)
        self.stats.batches += 1
        self.handle(self.store.process(items).outgoing)

    def handle(self, outgoing: Iterable[Outgoing]) -> None:
        candidates: list[str] = []
        for o in outgoing:
            if o.stream != "actions":
                continue
            kind, incident_id = o.payload.get("kind"), str(o.payload.get("incident_id"))
            if kind == "cordon_candidate" and incident_id not in candidates:
                candidates.append(incident_id)
            elif kind == "ticket":
                self.requests.tickets.add(incident_id)
            elif kind == "notification":
                self.requests.messages.add(incident_id)
        if not candidates:
            return
        with Session(self.store.engine) as s:
            rows = s.scalars(sa.select(Incident).where(Incident.incident_id.in_(candidates))).all()
            for row in sorted(rows, key=lambda r: (r.last_seen, r.incident_id)):  # as their faults happened
                if row.merged_into:
                    continue  # its faults, and their cordon, are the incident's it was merged into
                window = self.cluster.policy.longest_window_s()
                inputs = loop_inputs(s, row.incident_id, window)
                self.cluster.decide(cordon_request(s, row, window), row.gpu_uuid,
                                    inputs.subject if inputs is not None else None)


def run_replay(
    root: Path,
    *,
    policy: CordonPolicy | None = None,
    database_url: str | None = None,
    pipeline_policy: PipelinePolicy | None = None,
    sinks: SinkSettings | None = None,
    cluster_name: str = "replay",
    batch_items: int = BATCH_ITEMS,
) -> ReplayResult:
    """Replay the recorded cluster in `root`; ReplayInputError when it cannot be read."""
    started = time.monotonic()
    layout = open_cluster_dir(root)
    records = ClusterRecords(layout)
    with tempfile.TemporaryDirectory(prefix="xidpipe-replay-") as scratch:
        url = database_url or f"sqlite:///{Path(scratch) / 'replay.db'}"
        store = Store(url, pipeline_policy or PipelinePolicy(), cluster_name)
        try:
            store.create_schema()
            if database_url and _has_incidents(store.engine):
                raise ReplayInputError(f"the database {sa.make_url(url).render_as_string(hide_password=True)} "
                                       "already holds incidents: replay into an empty database")
            cluster = DryRunCluster(policy or CordonPolicy(), layout.node_labels, layout.nodes, layout.pool_nodes)
            feeder = _Feeder(store, cluster, batch_items)
            for rec in records:
                feeder.add(rec)
            feeder.finish()
            incidents = [incident_view(r) for r in all_incidents(store.engine) if not r.get("merged_into")]
            outcomes = sink_outcomes(store.engine, feeder.requests.tickets, feeder.requests.messages,
                                     sinks or SinkSettings(), cluster_name)
        finally:
            store.dispose()
    stats = feeder.stats
    stats.nodes, stats.lines_read, stats.lines_kept = len(layout.logs), records.lines_read, records.lines_kept
    stats.seconds = time.monotonic() - started
    return ReplayResult(incidents, cluster, outcomes, stats, database_url)


def _has_incidents(engine: sa.Engine) -> bool:
    with Session(engine) as s:
        return s.scalar(sa.select(Incident.incident_id).limit(1)) is not None
