"""The store: the SQL transaction around the grouping engine. Batches of items in, committed fault
events, incidents and outbox rows out.

One batch is one transaction: duplicates are dropped (a redelivered record, and another copy of a kernel
record already stored: `models.record_identity`), state and evidence are stored, the faults go
through `streams.grouping.IncidentGrouping` (attribution, merging, the grouping engine
`models.grouping` on the transaction's locked rows, fleet view), and the messages to publish are
written to the outbox in the same transaction. The sweep resolves what went quiet.
`streams.intake_process.IntakeProcess` runs all of it on one database thread or process, so the
event loop never waits on SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.incident_rows import incident_state, lock_conflict
from history.ledger_store import apply_inventories
from history.tables import (
    EvidenceRecord,
    FaultEvent,
    GpuAssignment,
    Incident,
    NodeState,
    OutboxMessage,
    SeenRecord,
)
from models.actions import action_requests, evidence_request
from models.correlate import workload_name
from models.dead_letter import DeadLetter
from models.incidents import FaultObservation, resolve_if_quiet
from models.pci import normalize_pci
from models.record_identity import RecordIdentity, same_record
from models.stream_policy import PipelinePolicy
from models.workloads import WorkloadRef
from streams import outbox
from streams.fleet import sweep_fleet
from streams.grouping import IncidentGrouping, StoreCaches
from streams.items import EvidenceItem, FaultItem, Item, StateItem
from streams.outbox import (
    Outgoing,
    action_message,
    incident_message,
    insert_outbox,
    outgoing,
    sent_update,
)

log = logging.getLogger(__name__)

_EVIDENCE_WAITS_S = 3600.0  # how long evidence waits for the fault that triggered it to be stored

RetryKind = Literal["unavailable", "lock_conflict", "write_conflict"]


class StoreRetry(Exception):
    """A transaction that failed and was rolled back, and that running again may commit: the store's one
    answer to "may this be retried?", picklable, so it crosses from the store process as it is.

    `unavailable`: the database cannot be reached or dropped the connection; it passes when the
    database is back. `lock_conflict`: a deadlock or a serialization failure with another transaction
    (another worker after a rebalance); running it again succeeds. `write_conflict`: a row another writer
    stored first (a unique key); a race retries clean, one that outlives a few retries is a bad record.
    """

    def __init__(self, kind: RetryKind, error: str, detail: str = "") -> None:
        super().__init__(kind, error, detail)
        self.kind: RetryKind = kind
        self.error = error  # what failed, without the database's words (the exception's type, ...)
        self.detail = detail  # the database's words

    def __str__(self) -> str:
        return f"{self.kind}: {self.error}" + (f": {self.detail}" if self.detail else "")

    @property
    def transient(self) -> bool:
        """The database's state, not the records: it passes for any records."""
        return self.kind != "write_conflict"


def retry_kind(exc: BaseException) -> RetryKind | None:
    """Which `StoreRetry` a database error is, or None when running the transaction again cannot help."""
    if lock_conflict(exc):
        return "lock_conflict"
    if isinstance(exc, sa.exc.IntegrityError):
        return "write_conflict"
    if isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError | sa.exc.TimeoutError):
        return "unavailable"
    return None


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class BatchResult:
    outgoing: list[Outgoing] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)  # input that cannot be handled
    marked: bool = True  # the published outbox ids handed in were marked sent (no transaction: not)
    faults: int = 0
    merged: int = 0
    duplicates: int = 0
    states: int = 0
    evidence: int = 0
    # Per new fault report of the batch: its catalog class and kernel event time (epoch seconds), for the
    # worker's metrics (fault events by class, Xid → incident latency).
    fault_times: list[tuple[str, float]] = field(default_factory=list)


class Store:
    """Synchronous; call it from one thread (IntakeProcess does)."""

    def __init__(self, url: str, policy: PipelinePolicy | None = None, cluster: str = "default") -> None:
        self.engine = make_engine(url)
        self.policy = policy or PipelinePolicy()
        self.cluster = cluster
        self.caches = StoreCaches()  # node histories, update times, fleet counts, the fault_events INSERT

    def create_schema(self) -> None:
        """Create or upgrade the tables with the Alembic migrations in `history/migrations`."""
        from history.migrate import upgrade

        upgrade(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()

    # -- the batch ---------------------------------------------------------------------------

    def process(self, items: Sequence[Item], now: datetime | None = None, sent: Sequence[int] = ()) -> BatchResult:
        """Handle a batch in one transaction; `sent`: outbox ids published meanwhile, marked sent in it too.

        The transaction runs once. A failure that running it again may cure is raised as `StoreRetry`
        (the caller retries: the worker, `streams.app`); any other error is raised as it is.
        """
        try:
            return self._process(items, now or utcnow(), BatchResult(), sent)
        except BaseException as exc:
            self.caches.forget_uncommitted()  # they may hold rows of the transaction that was rolled back
            kind = retry_kind(exc)
            if kind is None:
                raise
            raise StoreRetry(kind, type(exc).__name__, str(getattr(exc, "orig", None) or exc)) from exc

    def _process(self, items: Sequence[Item], now: datetime, res: BatchResult, sent: Sequence[int]) -> BatchResult:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            if sent:
                s.connection().execute(sent_update(sent))
            late = self._states(s, [i for i in items if isinstance(i, StateItem)], res)
            faults = self._new_faults(s, [i.observation for i in items if isinstance(i, FaultItem)], res)
            s.flush()
            batch = IncidentGrouping(s, self.policy, self.cluster, self.caches, now)
            batch.repair(late)
            batch.faults(faults)
            res.faults, res.merged = batch.faults_stored, batch.faults_merged
            res.fault_times = [(f.category or "unknown", f.occurred_at.timestamp()) for f in faults]
            for incident_id, record_id in self._evidence(s, [i for i in items if isinstance(i, EvidenceItem)], res):
                row = s.get(Incident, incident_id)
                if row is not None:  # late evidence: the ticket sink refreshes the dossier's attachments
                    batch.outbox.append(action_message(evidence_request(row.incident_id, row.node, row.gpu,
                                                                        record_id), row))
            if faults:
                with s.no_autoflush:  # it touches evidence only: the batch's other changes are flushed once, below
                    self._link_waiting_evidence(s, {f.node for f in faults})
            batch.finish()
            s.flush()
            res.outgoing = [outgoing(o) for o in batch.outbox]
        return res

    def _states(self, s: Session, states: list[StateItem], res: BatchResult) -> dict[str, datetime]:
        """Store new state snapshots; returns, per node, the earliest time from which they are valid."""
        valid_from: dict[str, datetime] = {}
        if not states:
            return valid_from
        keys = {(i.node, i.record_id) for i in states}
        seen: set[tuple[str, str]] = set(
            (node, rid) for node, rid in s.execute(
                sa.select(SeenRecord.node, SeenRecord.record_id).where(
                    sa.tuple_(SeenRecord.node, SeenRecord.record_id).in_(list(keys))
                )
            )
        )
        inventories: list[tuple[str, datetime, dict[str, Any]]] = []
        for it in sorted(states, key=lambda i: i.kind != "workloads"):  # a batch's workloads before its pods
            key = (it.node, it.record_id)
            if key in seen:
                res.duplicates += 1
                continue
            seen.add(key)
            res.states += 1
            valid_from[it.node] = min(valid_from.get(it.node, it.valid_from), it.valid_from)
            s.add(SeenRecord(node=it.node, record_id=it.record_id, topic=it.topic, seen_at=utcnow()))
            s.add(NodeState(node=it.node, kind=it.kind, record_id=it.record_id, valid_from=it.valid_from,
                            payload=it.payload))
            if it.kind == "inventory":  # the GPU asset ledger: placements, swaps, moves, returns
                inventories.append((it.node, it.valid_from, it.payload))
            if it.kind == "pods":
                owners = self._owners(s, it.node, it.valid_from)
                for a in it.payload.get("assignments", []):
                    workload = workload_name(a.get("namespace"), a.get("pod"), a.get("container"), None,
                                             owner=owners.get((a.get("namespace"), a.get("pod"))))
                    s.add(GpuAssignment(node=it.node, gpu=a["gpu_id"], workload=workload or "?", pod=a["pod"],
                                        namespace=a["namespace"], container=a["container"], seen_at=it.valid_from))
        if inventories:
            apply_inventories(s, inventories)
        return valid_from

    @staticmethod
    def _owners(s: Session, node: str, at: datetime) -> dict[tuple[str, str], WorkloadRef]:
        """(namespace, pod) → workload in the node's workload snapshot valid at `at` (this batch's included)."""
        payload = s.scalars(sa.select(NodeState.payload).where(
            NodeState.node == node, NodeState.kind == "workloads", NodeState.valid_from <= at,
        ).order_by(NodeState.valid_from.desc(), NodeState.id.desc()).limit(1)).first()
        pods = payload.get("pods", []) if isinstance(payload, dict) else []
        return {(p["namespace"], p["pod"]): WorkloadRef.model_validate(p["workload"]) for p in pods}

    def _new_faults(self, s: Session, faults: list[FaultObservation], res: BatchResult) -> list[FaultObservation]:
        if not faults:
            return []
        hashes = {f.content_hash for f in faults}
        nodes = {f.node for f in faults}
        known: set[tuple[str, str]] = set()
        # Two lookups, each on its index ((node, content_hash) and partner_hash): with an OR the database
        # reads every event of the batch's nodes.
        for node, content, partner in s.connection().execute(  # Core: no ORM bookkeeping, no autoflush
            sa.select(FaultEvent.node, FaultEvent.content_hash, FaultEvent.partner_hash).where(
                FaultEvent.node.in_(nodes), FaultEvent.content_hash.in_(hashes))
            .union_all(sa.select(FaultEvent.node, FaultEvent.content_hash, FaultEvent.partner_hash).where(
                FaultEvent.partner_hash.in_(hashes)))
        ):
            known.add((node, content))
            if partner:
                known.add((node, partner))
        fresh: list[FaultObservation] = []
        for f in faults:
            key = (f.node, f.content_hash)
            if key in known:
                res.duplicates += 1
                continue
            known.add(key)
            fresh.append(f)
        return self._first_copies(s, fresh, res)

    def _first_copies(self, s: Session, faults: list[FaultObservation], res: BatchResult) -> list[FaultObservation]:
        """Drop the reports that are another copy of a kernel record already stored or earlier in the batch
        (`models.record_identity`: the same Xid line in kern.log and syslog is one report)."""
        keys = {f.record_key for f in faults if f.record_key}
        if not keys:
            return faults
        stored: dict[tuple[str, str | None], list[str | None]] = {}
        for node, key, boot in s.connection().execute(
            sa.select(FaultEvent.node, FaultEvent.record_key, FaultEvent.boot_id).where(
                FaultEvent.node.in_({f.node for f in faults if f.record_key}), FaultEvent.record_key.in_(keys))
        ):
            stored.setdefault((node, key), []).append(boot)
        fresh: list[FaultObservation] = []
        for f in faults:
            if f.record_key:
                boots = stored.setdefault((f.node, f.record_key), [])
                mine = RecordIdentity(f.record_key, f.boot_id)
                if any(same_record(mine, RecordIdentity(f.record_key, b)) for b in boots):
                    res.duplicates += 1
                    log.debug("another copy of kernel record %s on %s dropped", f.record_key, f.node,
                              extra={"node": f.node, "record_id": f.record_id})
                    continue
                boots.append(f.boot_id)
            fresh.append(f)
        return fresh

    def _evidence(self, s: Session, items: list[EvidenceItem], res: BatchResult) -> list[tuple[str, str]]:
        """Store new evidence; returns (incident id, evidence record id) of the evidence whose fault is
        already part of an incident."""
        linked: list[tuple[str, str]] = []
        if not items:
            return linked
        keys = {(i.record.node, i.record.record_id) for i in items}
        have: set[tuple[str, str]] = set(
            (node, rid) for node, rid in s.execute(
                sa.select(EvidenceRecord.node, EvidenceRecord.record_id).where(
                    sa.tuple_(EvidenceRecord.node, EvidenceRecord.record_id).in_(list(keys))
                )
            )
        )
        for it in items:
            ev = it.record
            if (ev.node, ev.record_id) in have:
                res.duplicates += 1
                continue
            have.add((ev.node, ev.record_id))
            res.evidence += 1
            found = s.execute(
                sa.select(FaultEvent.id, FaultEvent.incident_id).where(
                    FaultEvent.node == ev.node,
                    sa.or_(FaultEvent.record_id == ev.trigger_record_id,
                           FaultEvent.nvml_record_id == ev.trigger_record_id),
                ).limit(1)
            ).first()
            event_id = found[0] if found else None
            if found and found[1]:
                linked.append((found[1], ev.record_id))
            s.add(EvidenceRecord(
                node=ev.node, record_id=ev.record_id, trigger_record_id=ev.trigger_record_id, fault_event_id=event_id,
                gpu_uuid=ev.gpu_uuid, pci=normalize_pci(ev.pci_bus_id), xid=ev.xid, pid=ev.pid,
                captured_at=ev.captured_at,
                manifest=[i.model_dump(mode="json", exclude={"data"}) for i in ev.items],
                items=[i.model_dump(mode="json") for i in ev.items],
            ))
        return linked

    def _link_waiting_evidence(self, s: Session, nodes: set[str]) -> None:
        """Evidence that arrived before the fault that triggered it gets linked once the fault is stored."""
        event_id = (
            sa.select(FaultEvent.id)
            .where(FaultEvent.node == EvidenceRecord.node,
                   sa.or_(FaultEvent.record_id == EvidenceRecord.trigger_record_id,
                          FaultEvent.nvml_record_id == EvidenceRecord.trigger_record_id))
            .limit(1)
            .scalar_subquery()
        )
        s.connection().execute(  # Core: evidence rows of earlier batches, no ORM state to keep in step
            sa.update(EvidenceRecord)
            .where(EvidenceRecord.fault_event_id.is_(None), EvidenceRecord.node.in_(nodes),
                   EvidenceRecord.captured_at >= utcnow() - timedelta(seconds=_EVIDENCE_WAITS_S))
            .values(fault_event_id=event_id)
        )

    # -- sweeps and the outbox -------------------------------------------------------------------

    def sweep(self, now: datetime | None = None) -> list[Outgoing]:
        """Resolve incidents and fleet incidents that went quiet (measured on arrival time)."""
        now = now or utcnow()
        p = self.policy
        messages: list[OutboxMessage] = []
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            quiet_before = now - timedelta(seconds=p.quiet_period_s)
            # Rows a batch is changing are skipped (it updates them), never waited for nor overwritten.
            for row in s.scalars(sa.select(Incident).where(Incident.status == "open",
                                                             Incident.updated_at <= quiet_before)
                                 .with_for_update(skip_locked=True)):
                change = resolve_if_quiet(incident_state(row), row.updated_at, now, p)
                if change is None:
                    continue
                row.status, row.resolved_at, row.updated_at = "resolved", now, now
                row.version += 1
                log.info("incident %s resolved: %s", row.incident_id, change.reason,
                         extra={"node": row.node, "gpu": row.gpu, "incident": row.incident_id})
                messages.append(incident_message(row, "resolved", change.reason))
                for a in action_requests(change, version=row.version):
                    messages.append(action_message(a, row))
            messages.extend(sweep_fleet(s, p, now))
            messages = insert_outbox(s, messages)
            s.flush()
            return [outgoing(o) for o in messages]

    def unsent(self, older_than_s: float, limit: int = 1000) -> list[Outgoing]:
        """Outbox rows not marked sent `older_than_s` seconds after they were written, oldest first."""
        return outbox.unsent(self.engine, older_than_s, limit)

    def mark_sent(self, ids: Iterable[int]) -> None:
        outbox.mark_sent(self.engine, ids)

    def prune_sent(self, keep_s: float) -> int:
        """Delete outbox rows sent more than `keep_s` seconds ago (a bounded number per call)."""
        return outbox.prune_sent(self.engine, keep_s)
