"""The SQL adapter: batches of items in, committed fault events, incidents and outbox rows out.

One batch is one transaction: duplicates are dropped, faults are attributed with the node state
valid at their time (`models.correlate`), kernel and NVML reports of one fault are merged,
incidents are grouped and classified (`models.incidents`), fleet bursts are detected, and the
messages to publish are written to the outbox in the same transaction. `AsyncStore` runs all of
it on one database thread, so the event loop never waits on SQL.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.incident_index import IncidentIndex
from history.ledger_store import apply_inventory_payload
from history.tables import (
    EvidenceRecord,
    FaultEvent,
    FleetIncident,
    GpuAssignment,
    Incident,
    NodeState,
    OutboxMessage,
    SeenRecord,
    metadata,
)
from models.classify import Verdict
from models.correlate import (
    Attribution,
    IdentityLine,
    InventorySnapshot,
    NodeHistory,
    PodSnapshot,
    ProcessSnapshot,
    correlate,
    workload_name,
)
from models.fingerprint import incident_fingerprint
from models.incidents import (
    ActionRequest,
    ClassifyContext,
    FaultObservation,
    IncidentChange,
    IncidentState,
    action_to_dict,
    actions_for,
    apply_fault,
    classify_in_context,
    fleet_burst,
    incident_gpu,
    resolve_if_quiet,
    same_fault,
)
from models.node_records import DeviceAssignment, GpuInfo, GpuProcess
from models.pci import normalize_pci
from models.stream_policy import PipelinePolicy
from streams.decode import DeadLetter, decode_message
from streams.ingest import EvidenceItem, FaultItem, Ingest, Item, StateItem

log = logging.getLogger(__name__)

_MAX_LISTED = 20  # pods, processes, workloads listed on one incident
_UPDATES_REMEMBERED = 100_000  # incidents whose last update time is kept
_FLEET_RECHECK_S = 1.0  # how often one family's fleet window is counted again without a new node
_EVIDENCE_WAITS_S = 3600.0  # how long evidence waits for the fault that triggered it to be stored
_ATTRIBUTIONS_REMEMBERED = 10_000  # attributions kept converted for the fault_events INSERT


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Message:
    """An input message as consumed: what the intake decodes, and what a dead letter repeats."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Outgoing:
    outbox_id: int
    stream: str  # "incidents" or "actions"
    key: str
    payload: dict[str, Any]


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


class Store:
    """Synchronous; call it from one thread (AsyncStore does)."""

    def __init__(self, url: str, policy: PipelinePolicy | None = None, cluster: str = "default") -> None:
        self.engine = make_engine(url)
        self.policy = policy or PipelinePolicy()
        self.cluster = cluster
        # Per node: (highest node_state id, start, history) of the last history loaded.
        self.histories: dict[str, tuple[int, datetime, NodeHistory]] = {}
        # Per incident: when its last update was published (monotonic).
        self.updates_sent: dict[str, float] = {}
        # Per fault family: (monotonic time, nodes counted) of the last fleet query.
        self.fleet_checked: dict[str, tuple[float, set[str]]] = {}
        # The fault_events INSERT per (dialect, columns), and attributions converted for it.
        self._insert_plans: dict[tuple[str, tuple[str, ...]], tuple[str, bool, tuple[str, ...], dict[str, Any]]] = {}
        self._attribution_binds: dict[Attribution, Any] = {}

    def create_schema(self) -> None:
        """Create or upgrade the tables with the Alembic migrations in `history/migrations`."""
        from history.migrate import upgrade

        upgrade(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()

    def insert_fault_events(self, s: Session, rows: list[dict[str, Any]]) -> None:
        """Insert fault_events rows with one executemany on the session's connection.

        The values go through the columns' own bind processors (the same conversions the ORM makes),
        applied here without the per-row statement bookkeeping, and each distinct attribution or time
        is converted once.
        """
        conn = s.connection()
        keys = tuple(rows[0])
        plan = self._insert_plans.get((conn.dialect.name, keys))
        if plan is None:
            table = FaultEvent.__table__
            assert isinstance(table, sa.Table)
            compiled = sa.insert(table).compile(dialect=conn.dialect, column_keys=list(keys))
            order = tuple(compiled.positiontup or ()) if compiled.positional else keys
            procs = {k: table.c[k].type._cached_bind_processor(conn.dialect) for k in keys}
            plan = self._insert_plans[(conn.dialect.name, keys)] = (str(compiled), compiled.positional, order, procs)
        sql, positional, order, procs = plan
        converted = [(i, proc) for i, k in enumerate(order) if (proc := procs[k]) is not None]
        memo: dict[Any, Any] = {}  # a batch's rows share their ingestion time, and often their attribution
        attributions = self._attribution_binds
        params: list[Any] = []
        for r in rows:
            values = [r[k] for k in order]
            for i, proc in converted:
                v = values[i]
                if v is None:
                    continue
                if isinstance(v, Attribution):
                    bound = attributions.get(v)
                    if bound is None:
                        if len(attributions) >= _ATTRIBUTIONS_REMEMBERED:
                            attributions.clear()
                        bound = attributions[v] = proc(v.to_dict())
                    values[i] = bound
                elif isinstance(v, datetime):
                    bound = memo.get(v)
                    if bound is None:
                        bound = memo[v] = proc(v)
                    values[i] = bound
                else:
                    values[i] = proc(v)
            params.append(tuple(values) if positional else dict(zip(order, values, strict=True)))
        conn.exec_driver_sql(sql, params)

    # -- the batch ---------------------------------------------------------------------------

    def process(self, items: Sequence[Item], now: datetime | None = None, sent: Sequence[int] = ()) -> BatchResult:
        """Handle a batch in one transaction; `sent`: outbox ids published meanwhile, marked sent in it too."""
        now = now or utcnow()
        res = BatchResult()
        try:
            return self._process(items, now, res, sent)
        except BaseException:
            self.histories.clear()  # they may hold rows of the transaction that was rolled back
            self.fleet_checked.clear()
            raise

    def _process(self, items: Sequence[Item], now: datetime, res: BatchResult, sent: Sequence[int]) -> BatchResult:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            if sent:
                s.connection().execute(sa.update(OutboxMessage).where(OutboxMessage.id.in_(list(sent)))
                                       .values(sent_at=utcnow()))
            late = self._states(s, [i for i in items if isinstance(i, StateItem)], res)
            faults = self._new_faults(s, [i.observation for i in items if isinstance(i, FaultItem)], res)
            s.flush()
            batch = _Batch(s, self, now, res)
            batch.repair(late)
            batch.faults(faults)
            for incident_id, record_id in self._evidence(s, [i for i in items if isinstance(i, EvidenceItem)], res):
                row = s.get(Incident, incident_id)
                if row is not None:  # late evidence: the ticket sink refreshes the dossier's attachments
                    batch.outbox.append(_action_message(ActionRequest(
                        "ticket", "evidence", row.incident_id, row.node, row.gpu, "evidence arrived",
                        f"{row.incident_id}:ticket:evidence:{record_id}"), row))
            if faults:
                with s.no_autoflush:  # it touches evidence only: the batch's other changes are flushed once, below
                    self._link_waiting_evidence(s, {f.node for f in faults})
            batch.finish()
            s.flush()
            res.outgoing = [_outgoing(o) for o in batch.outbox]
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
        for it in states:
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
                apply_inventory_payload(s, it.node, it.valid_from, it.payload)
            if it.kind == "pods":
                for a in it.payload.get("assignments", []):
                    workload = workload_name(a.get("namespace"), a.get("pod"), a.get("container"), None)
                    s.add(GpuAssignment(node=it.node, gpu=a["gpu_id"], workload=workload or "?", pod=a["pod"],
                                        namespace=a["namespace"], container=a["container"], seen_at=it.valid_from))
        return valid_from

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
        outbox: list[OutboxMessage] = []
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            quiet_before = now - timedelta(seconds=p.quiet_period_s)
            for row in s.scalars(sa.select(Incident).where(Incident.status == "open",
                                                             Incident.updated_at <= quiet_before)):
                change = resolve_if_quiet(_state(row), row.updated_at, now, p)
                if change is None:
                    continue
                row.status, row.resolved_at, row.updated_at = "resolved", now, now
                row.version += 1
                log.info("incident %s resolved: %s", row.incident_id, change.reason,
                         extra={"node": row.node, "gpu": row.gpu, "incident": row.incident_id})
                outbox.append(_incident_message(row, "resolved", change.reason))
                for a in actions_for(change, [], p):
                    outbox.append(_action_message(a, row))
            fleet_before = now - timedelta(seconds=p.fleet_window_s)
            for fleet in s.scalars(sa.select(FleetIncident).where(FleetIncident.status == "open",
                                                                    FleetIncident.updated_at <= fleet_before)):
                fleet.status, fleet.resolved_at, fleet.updated_at = "resolved", now, now
                outbox.append(_fleet_message(fleet, "resolved", "no new node in the fleet window"))
            outbox = _insert_outbox(s, outbox)
            s.flush()
            return [_outgoing(o) for o in outbox]

    def unsent(self, older_than_s: float, limit: int = 1000) -> list[Outgoing]:
        before = utcnow() - timedelta(seconds=older_than_s)
        with Session(self.engine) as s:
            rows = s.scalars(sa.select(OutboxMessage).where(OutboxMessage.sent_at.is_(None),
                                                              OutboxMessage.created_at <= before)
                             .order_by(OutboxMessage.id).limit(limit)).all()
            return [_outgoing(o) for o in rows]

    def mark_sent(self, ids: Iterable[int]) -> None:
        ids = list(ids)
        if not ids:
            return
        with Session(self.engine) as s, s.begin():
            s.execute(sa.update(OutboxMessage).where(OutboxMessage.id.in_(ids)).values(sent_at=utcnow()))

    # -- reads (tests, the demo, the API) --------------------------------------------------------

    def incidents(self) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            rows = s.scalars(sa.select(Incident).order_by(Incident.opened_at, Incident.incident_id)).all()
            return [incident_to_dict(r) for r in rows]

    def fault_events(self) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            rows = s.scalars(sa.select(FaultEvent).order_by(FaultEvent.id)).all()
            return [_row_dict(r) for r in rows]

    def fleet_incidents(self) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            rows = s.scalars(sa.select(FleetIncident).order_by(FleetIncident.first_seen)).all()
            return [_row_dict(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with Session(self.engine) as s:
            return {t.name: int(s.execute(sa.select(sa.func.count()).select_from(t)).scalar() or 0)
                    for t in metadata.sorted_tables}


class _Batch:
    """The fault handling of one transaction."""

    def __init__(self, s: Session, store: Store, now: datetime, res: BatchResult) -> None:
        self.s = s
        self.store = store
        self.p = store.policy
        self.now = now
        self.res = res
        self.incidents: dict[str, Incident] = {}  # by fingerprint, the latest row
        self.touched: dict[str, _Touched] = {}  # by incident id
        self.outbox: list[OutboxMessage] = []
        self.index = IncidentIndex()  # the (incident, code) and (incident, namespace) pairs of this batch
        self.fleet_families: dict[str, datetime] = {}
        self._no_incident: set[str] = set()  # fingerprints known to have no incident yet
        self.fleet_nodes: dict[str, set[str]] = defaultdict(set)
        self._tops: dict[str, int] = {}  # per node: the highest node_state id
        # Per incident grouped in this batch: its state after the faults so far, written to the row once
        # (`_write_back`) instead of after every fault.
        self.states: dict[str, IncidentState] = {}

    def faults(self, faults: list[FaultObservation]) -> None:
        if not faults:
            return
        by_node: dict[str, list[FaultObservation]] = defaultdict(list)
        for f in faults:
            by_node[f.node].append(f)
        attributed: list[tuple[FaultObservation, Attribution]] = []
        self._load_state_tops(set(by_node))
        for node, node_faults in by_node.items():
            history = self._history(node, min(o.occurred_at for o in node_faults))
            skew = self.p.clock_skew_s
            for o in node_faults:
                attributed.append((o, correlate(history, o.occurred_at, pci=o.pci, gpu_uuid=o.gpu_uuid,
                                                gpu_instance_id=o.gpu_instance_id, pid=o.pid, process=o.process,
                                                skew_s=skew)))
        partners = self._partner_candidates(attributed)
        self._preload_incidents(attributed)
        drafts: list[_Draft] = []
        for obs, attr in attributed:
            key = (obs.node, attr.gpu.uuid, obs.xid)
            pairable = obs.xid is not None and attr.gpu.uuid is not None
            if pairable and self._merge(obs, attr, partners.get((*key, _other(obs.source)), [])):
                self.res.merged += 1
                continue
            row = self._event_row(obs, attr)
            drafts.append(row)
            if pairable:
                partners.setdefault((*key, obs.source), []).append(row)
            self.res.faults += 1
            self._group(obs, attr, row)
        self._write_back()
        if drafts:  # one executemany, without the ORM's per-row bookkeeping
            self.store.insert_fault_events(self.s, [d.__dict__ for d in drafts])

    def _preload_incidents(self, attributed: list[tuple[FaultObservation, Attribution]]) -> None:
        """The latest incident of every fingerprint this batch may touch, in one query."""
        fps = {incident_fingerprint(o.node, incident_gpu(o.node, a.gpu.uuid, a.gpu.pci or normalize_pci(o.pci)),
                                    o.family) for o, a in attributed} - set(self.incidents)
        if not fps:
            return
        with self.s.no_autoflush:
            rows = self.s.scalars(sa.select(Incident).where(Incident.fingerprint.in_(fps))
                                  .order_by(Incident.opened_at, Incident.incident_id)).all()
        for row in rows:  # the latest wins
            self.incidents[row.fingerprint] = row
        self._no_incident = fps - {r.fingerprint for r in rows}

    def repair(self, late: dict[str, datetime]) -> None:
        """Attribute recent faults that state arriving now (read after them) is valid for."""
        if not late:
            return
        recent = self.now - timedelta(seconds=self.p.late_state_s)
        skew = self.p.clock_skew_s
        repaired: dict[str, Incident] = {}
        for node, valid_from in late.items():
            rows = self.s.scalars(sa.select(FaultEvent).where(
                FaultEvent.node == node, FaultEvent.ingested_at >= recent,
                FaultEvent.occurred_at >= valid_from - timedelta(seconds=skew),
                sa.or_(FaultEvent.gpu_uuid.is_(None), FaultEvent.pod.is_(None)),
            ).limit(5000)).all()
            if not rows:
                continue
            history = self._history(node, min(r.occurred_at for r in rows))
            for r in rows:
                attr = correlate(history, r.occurred_at, pci=r.pci, gpu_uuid=r.gpu_uuid, pid=r.pid,
                                 process=r.process, skew_s=skew)
                if not ((r.gpu_uuid is None and attr.gpu.uuid) or (r.pod is None and attr.pod.pod)):
                    continue
                g, p = attr.gpu, attr.pod
                r.gpu_uuid, r.serial, r.mig_uuid = r.gpu_uuid or g.uuid, r.serial or g.serial, r.mig_uuid or g.mig_uuid
                r.pod, r.namespace, r.container = p.pod, p.namespace, p.container
                r.workload, r.attribution = attr.workload, attr.to_dict()
                if r.incident_id is None:
                    continue
                self.index.add(r.incident_id, r.code, r.xid, p.namespace)
                inc = repaired.get(r.incident_id) or self.s.get(Incident, r.incident_id)
                if inc is None:
                    continue
                repaired[inc.incident_id] = inc
                inc.gpu_uuid, inc.serial = inc.gpu_uuid or g.uuid, inc.serial or g.serial
                _add_listed(inc, "pods", f"{p.namespace}/{p.pod}/{p.container}" if p.pod else None)
                _add_listed(inc, "workloads", attr.workload)
        for inc in repaired.values():
            inc.version += 1
            log.info("incident %s attributed by late node state", inc.incident_id,
                     extra={"node": inc.node, "gpu": inc.gpu_uuid, "incident": inc.incident_id})
            self.outbox.append(_incident_message(inc, "attributed", "node state read after the fault attributes it"))

    def _history(self, node: str, since: datetime) -> NodeHistory:
        """The node's state from `since` minus the history span; cached while no state row is added."""
        start = since - timedelta(seconds=self.p.history_s)
        if node not in self._tops:
            self._load_state_tops({node})
        top = self._tops[node]
        cached = self.store.histories.get(node)
        if cached is not None and cached[0] == top and cached[1] <= start:
            return cached[2]
        rows = self.s.scalars(
            sa.select(NodeState).where(NodeState.node == node, NodeState.valid_from >= start)
            .order_by(NodeState.valid_from, NodeState.id)
        ).all()
        h = NodeHistory(node)
        for r in rows:
            p = r.payload
            if r.kind == "inventory":
                h.inventories.append(InventorySnapshot(r.valid_from, tuple(GpuInfo.model_validate(g)
                                                                           for g in p.get("gpus", []))))
            elif r.kind == "identity":
                h.identities.append(IdentityLine(r.valid_from, p["pci"], p.get("uuid"), p.get("serial")))
            elif r.kind == "pods":
                h.pods.append(PodSnapshot(r.valid_from, tuple(DeviceAssignment.model_validate(a)
                                                              for a in p.get("assignments", []))))
            elif r.kind == "processes":
                h.processes.append(ProcessSnapshot(r.valid_from, tuple(GpuProcess.model_validate(x)
                                                                       for x in p.get("processes", []))))
        h.sort()
        self.store.histories[node] = (top, start, h)
        return h

    def _load_state_tops(self, nodes: set[str]) -> None:
        """The highest node_state id of each node (the key of its cached history), in one query."""
        nodes = nodes - set(self._tops)
        if not nodes:
            return
        found: dict[str, int] = {}
        tops = sa.select(NodeState.node, sa.func.max(NodeState.id)).where(NodeState.node.in_(nodes))
        for node, top in self.s.connection().execute(tops.group_by(NodeState.node)):
            found[node] = int(top or 0)
        for node in nodes:
            self._tops[node] = found.get(node, 0)

    def _partner_candidates(
        self, attributed: list[tuple[FaultObservation, Attribution]]
    ) -> dict[tuple[str, str | None, int | None, str], list[Any]]:
        """Unmerged single-source events that a fault of this batch may pair with, by (node, GPU, Xid, source)."""
        wanted: set[tuple[str, str | None, int | None, str]] = set()
        times: list[datetime] = []
        for obs, attr in attributed:
            if obs.xid is not None and attr.gpu.uuid:
                wanted.add((obs.node, attr.gpu.uuid, obs.xid, _other(obs.source)))
                times.append(obs.occurred_at)
        out: dict[tuple[str, str | None, int | None, str], list[Any]] = {}
        if not wanted:
            return out
        w = timedelta(seconds=self.p.duplicate_window_s)
        for row in self.s.scalars(
            sa.select(FaultEvent).where(
                FaultEvent.node.in_({k[0] for k in wanted}), FaultEvent.gpu_uuid.in_({k[1] for k in wanted}),
                FaultEvent.xid.in_({k[2] for k in wanted}), FaultEvent.sources.in_({k[3] for k in wanted}),
                FaultEvent.occurred_at >= min(times) - w, FaultEvent.occurred_at <= max(times) + w,
            ).order_by(FaultEvent.occurred_at)
        ):
            key = (row.node, row.gpu_uuid, row.xid, row.sources)
            if key in wanted:
                out.setdefault(key, []).append(row)
        return out

    def _merge(self, obs: FaultObservation, attr: Attribution, candidates: list[Any]) -> bool:
        """`candidates`: FaultEvent rows of earlier batches and _Draft rows of this one."""
        """Pair `obs` with the closest candidate report of the other source (removed from the list)."""
        best: int | None = None
        best_gap = 0.0
        for i, c in enumerate(candidates):
            if not same_fault(obs.source, obs.gpu_uuid or c.gpu_uuid, obs.xid, obs.occurred_at,
                              c.sources, c.gpu_uuid, c.xid, c.occurred_at, self.p.duplicate_window_s):
                continue
            gap = abs((c.occurred_at - obs.occurred_at).total_seconds())
            if best is None or gap < best_gap:
                best, best_gap = i, gap
        if best is None:
            return False
        partner = candidates.pop(best)
        partner.sources = "kernel+nvml"
        partner.partner_hash = obs.content_hash
        if obs.source == "kernel":  # the kernel line is the better evidence: its text, pid and process
            partner.nvml_record_id = partner.record_id
            partner.record_id, partner.raw, partner.message = obs.record_id, obs.raw, obs.message
            partner.pid, partner.process = attr.process.pid, attr.process.process
            if attr.pod.pod or partner.pod is None:
                partner.pod, partner.namespace, partner.container = attr.pod.pod, attr.pod.namespace, attr.pod.container
                partner.workload = attr.workload
            partner.attribution = attr.to_dict()
            inc = self.s.get(Incident, partner.incident_id) if partner.incident_id else None
            if inc is not None:
                _add_listed(inc, "processes", f"{obs.process or '?'}[{obs.pid}]" if obs.pid is not None else None)
                _add_listed(inc, "pods", f"{attr.pod.namespace}/{attr.pod.pod}/{attr.pod.container}"
                            if attr.pod.pod else None)
                _add_listed(inc, "workloads", attr.workload)
        else:
            partner.nvml_record_id = obs.record_id
        log.debug("kernel and NVML reports of %s on %s merged", obs.code, partner.gpu_uuid,
                  extra={"node": obs.node, "gpu": partner.gpu_uuid, "xid": obs.xid})
        return True

    def _event_row(self, obs: FaultObservation, attr: Attribution) -> _Draft:
        g, p, r = attr.gpu, attr.pod, attr.process
        return _Draft(
            node=obs.node, content_hash=obs.content_hash, record_id=obs.record_id, sources=obs.source,
            nvml_record_id=obs.record_id if obs.source == "nvml" else None, occurred_at=obs.occurred_at,
            ingested_at=self.now, kind=obs.kind, family=obs.family, code=obs.code, xid=obs.xid, sxid=obs.sxid,
            gpu=incident_gpu(obs.node, g.uuid, g.pci or normalize_pci(obs.pci)), gpu_uuid=g.uuid, serial=g.serial,
            pci=g.pci or normalize_pci(obs.pci), mig_uuid=g.mig_uuid, pid=r.pid, process=r.process, pod=p.pod,
            namespace=p.namespace, container=p.container, workload=attr.workload, catalog_category=obs.category,
            mnemonic=obs.mnemonic, immediate_action=obs.immediate_action, message=obs.message, raw=obs.raw,
            attribution=attr, partner_hash=None, incident_id=None,  # the insert converts `attr` (cached)
        )

    def _group(self, obs: FaultObservation, attr: Attribution, event: _Draft) -> None:
        node, gpu, family = obs.node, event.gpu, obs.family
        if gpu == "node":
            # A node-level line (no PCI address, no UUID: "GPU lost", a crash dump) joins the latest open
            # incident of its family on the node, as `xidpipe scan` does.
            gpu = event.gpu = self._node_level_gpu(node, family)
        fp = incident_fingerprint(node, gpu, family)
        row = self.incidents.get(fp)
        if row is None and fp not in self._no_incident:
            row = self.s.scalars(sa.select(Incident).where(Incident.fingerprint == fp)
                                 .order_by(Incident.opened_at.desc(), Incident.incident_id.desc()).limit(1)).first()
        current = None
        if row is not None:
            current = self.states.get(row.incident_id) or _state(row)
        change = apply_fault(current, node=node, gpu=gpu, family=family, code=obs.code, at=obs.occurred_at,
                             policy=self.p)
        if change.resolved_previous is not None and row is not None:
            self._write_back()  # the faults of this batch so far, before the row is resolved
            self.states.pop(row.incident_id, None)
            row.status, row.resolved_at, row.updated_at = "resolved", change.resolved_previous.resolved_at, self.now
            row.version += 1
            self.outbox.append(_incident_message(row, "resolved", change.reason))
            self.touched.pop(row.incident_id, None)
        inc = change.incident
        if change.kind in ("opened", "reopened"):
            if change.resolved_previous is not None:
                self.s.flush()  # the resolved row first: one open incident per fingerprint
            row = Incident(
                incident_id=inc.incident_id, fingerprint=fp, node=node, gpu=gpu, family=family, status="open",
                category=obs.category or "unknown", reason=change.reason, count=1, first_seen=inc.first_seen,
                last_seen=inc.last_seen, opened_at=self.now, updated_at=self.now, resolved_at=None,
                previous_incident_id=inc.previous_incident_id, gpu_uuid=attr.gpu.uuid, serial=attr.gpu.serial,
                pci=attr.gpu.pci or normalize_pci(obs.pci), codes=list(inc.codes), pods=[], processes=[],
                workloads=[], immediate_action=obs.immediate_action, investigatory_action=obs.investigatory_action,
                description=obs.description, cordon_requested=False, version=1,
            )
            self.s.add(row)
            log.info("incident %s %s: %s", inc.incident_id, change.kind, change.reason,
                     extra={"node": node, "gpu": gpu, "xid": obs.xid, "incident": inc.incident_id})
        assert row is not None
        self.states[row.incident_id] = inc  # count, first and last seen, codes: written by `_write_back`
        self.incidents[fp] = row
        if attr.gpu.uuid and not row.gpu_uuid:
            row.gpu_uuid = attr.gpu.uuid
        if attr.gpu.serial and not row.serial:
            row.serial = attr.gpu.serial
        if obs.immediate_action and not row.immediate_action:
            row.immediate_action = obs.immediate_action
        if obs.investigatory_action and not row.investigatory_action:
            row.investigatory_action = obs.investigatory_action
        if obs.description and not row.description:
            row.description = obs.description
        _add_listed(row, "pods", f"{attr.pod.namespace}/{attr.pod.pod}/{attr.pod.container}" if attr.pod.pod else None)
        _add_listed(row, "processes",
                    f"{attr.process.process or '?'}[{attr.process.pid}]" if attr.process.pid is not None else None)
        _add_listed(row, "workloads", attr.workload)
        event.incident_id = row.incident_id
        self.index.add(row.incident_id, obs.code, obs.xid, attr.pod.namespace)
        t = self.touched.get(row.incident_id)
        if t is None:
            t = self.touched[row.incident_id] = _Touched(row, change.kind, change.reason)
        t.observations.append(obs)
        if family in self.p.fleet_families:
            self.fleet_families[family] = max(self.fleet_families.get(family, obs.occurred_at), obs.occurred_at)
            self.fleet_nodes[family].add(node)

    def _write_back(self) -> None:
        """Put the incident states grouped so far on their rows (one set of attribute writes per incident)."""
        for incident_id, st in self.states.items():
            t = self.touched.get(incident_id)
            row = t.row if t is not None else None
            if row is None or row.status != "open":
                continue
            if row.count != st.count:
                row.count, row.last_seen, row.first_seen = st.count, st.last_seen, st.first_seen
                row.updated_at = self.now
            if tuple(row.codes or ()) != st.codes:
                row.codes = list(st.codes)

    def _last_seen(self, row: Incident) -> datetime:
        st = self.states.get(row.incident_id)
        return st.last_seen if st is not None else row.last_seen

    def _node_level_gpu(self, node: str, family: str) -> str:
        here = [r for r in self.incidents.values()
                if r.node == node and r.family == family and r.status == "open" and r.gpu != "node"]
        if here:
            return max(here, key=self._last_seen).gpu
        with self.s.no_autoflush:
            gpu = self.s.scalars(sa.select(Incident.gpu).where(
                Incident.node == node, Incident.family == family, Incident.status == "open", Incident.gpu != "node",
            ).order_by(Incident.last_seen.desc()).limit(1)).first()
        return gpu or "node"

    def finish(self) -> None:
        # Fault events are inserted and node state flushed already: classification queries need nothing
        # else, so the incidents' changes are flushed once, with the outbox.
        with self.s.no_autoflush:
            contexts = self._application_contexts([t.row for t in self.touched.values()
                                                   if t.row.family == "application"])
            for t in self.touched.values():
                self._classify_and_emit(t, contexts.get(t.row.incident_id))
        for family, at in self.fleet_families.items():
            # The fleet query scans a window of events: once a second per family is enough. A node that was
            # not counted yet joins the nodes of the last count at once, without the query.
            checked = self.store.fleet_checked.get(family)
            nodes = self.fleet_nodes[family]
            with self.s.no_autoflush:
                if checked and time.monotonic() - checked[0] < _FLEET_RECHECK_S:
                    if not nodes <= checked[1]:
                        known = checked[1] | nodes
                        self._fleet(family, at, sorted(known))
                        self.store.fleet_checked[family] = (checked[0], known)
                    continue
                self.store.fleet_checked[family] = (time.monotonic(), set(self._fleet(family, at)))
        self.index.write(self.s)
        self.outbox = _insert_outbox(self.s, self.outbox)

    def _classify_and_emit(self, t: _Touched, context: _AppContext | None) -> None:
        row = t.row
        verdict = self._verdict(row, t.observations, context)
        kind, reason = t.kind, t.reason
        if kind == "updated" and verdict.category != row.category:
            kind, reason = "reclassified", f"{row.category} → {verdict.category}: {verdict.reason}"
        elif kind == "updated":
            reason = f"{row.count} faults; last {t.observations[-1].code}"
        row.category, row.reason = verdict.category, verdict.reason
        if kind != "opened" and kind != "reopened":
            row.version += 1
        state = _state(row)
        xids = [o.xid for o in t.observations if o.xid is not None]
        actions = actions_for(IncidentChange(kind, state, reason), xids, self.p)  # type: ignore[arg-type]
        if any(a.kind == "cordon_candidate" for a in actions):
            row.cordon_requested = True
        # A repeat is published at most once per update interval (a storm updates the row every batch);
        # every other change, and any change that requests an action, at once.
        sent = self.store.updates_sent
        now = time.monotonic()
        if kind != "updated" or actions or now - sent.get(row.incident_id, -1e9) >= self.p.update_interval_s:
            sent[row.incident_id] = now
            if len(sent) > _UPDATES_REMEMBERED:
                sent.pop(next(iter(sent)))
            self.outbox.append(_incident_message(row, kind, reason))
            if kind == "updated" and not actions:
                # Repeats reach the ticket sink at the update interval; it decides whether they make a
                # (rate-limited) comment or nothing.
                actions = [ActionRequest("ticket", f"update:v{row.version}", row.incident_id, row.node, row.gpu,
                                         reason, f"{row.incident_id}:ticket:update:v{row.version}")]
        self.outbox.extend(_action_message(a, row) for a in actions)

    def _verdict(self, row: Incident, observations: list[FaultObservation], app: _AppContext | None) -> Verdict:
        cats = [o.category for o in observations if o.category]
        severity = next((str(o.details["severity"]) for o in reversed(observations) if "severity" in o.details), None)
        recovery = next((str(o.details["recovery_action_new"]) for o in reversed(observations)
                         if "recovery_action_new" in o.details), None)
        gpu_label = row.gpu_uuid or (f"GPU {row.pci}" if row.pci else "the node")
        if row.family != "application" or app is None:
            return classify_in_context(ClassifyContext(
                gpu=gpu_label, family=row.family, codes=row.codes, categories=cats, count=row.count,
                workloads=list(row.workloads), workload_fault_gpus={}, severity=severity, recovery_action=recovery,
            ), self.p)
        return classify_in_context(ClassifyContext(
            gpu=gpu_label, family=row.family, codes=row.codes, categories=cats, count=max(app.count, row.count),
            workloads=app.workloads, workload_fault_gpus=app.fault_gpus, workload_clean_gpus=app.clean_gpus,
        ), self.p)

    def _application_contexts(self, rows: list[Incident]) -> dict[str, _AppContext]:
        """Workloads of each application incident's GPU and where else they faulted or ran clean,
        within the classification window (from the earliest incident of the batch), in three queries."""
        if not rows:
            return {}
        since = min(r.last_seen for r in rows) - timedelta(seconds=self.p.classify_window_s)
        pairs = sorted({(r.node, r.gpu) for r in rows})
        here: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        for node, gpu, workload, n in self.s.execute(
            sa.select(FaultEvent.node, FaultEvent.gpu, FaultEvent.workload, sa.func.count()).where(
                FaultEvent.family == "application", FaultEvent.occurred_at >= since,
                sa.tuple_(FaultEvent.node, FaultEvent.gpu).in_(pairs),
            ).group_by(FaultEvent.node, FaultEvent.gpu, FaultEvent.workload)
        ):
            here[(node, gpu)][workload or ""] = int(n)
        workloads = sorted({w for counts in here.values() for w in counts if w})
        fault_gpus: dict[str, set[tuple[str, str]]] = defaultdict(set)
        ran: dict[str, set[tuple[str, str]]] = defaultdict(set)
        if workloads:
            for w, node, gpu_uuid, gpu in self.s.execute(
                sa.select(FaultEvent.workload, FaultEvent.node, FaultEvent.gpu_uuid, FaultEvent.gpu).distinct().where(
                    FaultEvent.workload.in_(workloads), FaultEvent.family == "application",
                    FaultEvent.occurred_at >= since,
                )
            ):
                if w:
                    fault_gpus[w].add((node, gpu_uuid or gpu))
            for w, node, gpu in self.s.execute(
                sa.select(GpuAssignment.workload, GpuAssignment.node, GpuAssignment.gpu).distinct().where(
                    GpuAssignment.workload.in_(workloads), GpuAssignment.seen_at >= since,
                )
            ):
                ran[w].add((node, gpu))
        out: dict[str, _AppContext] = {}
        for r in rows:
            counts = here.get((r.node, r.gpu), {})
            ws = sorted(w for w in counts if w)
            out[r.incident_id] = _AppContext(
                count=sum(counts.values()), workloads=ws,
                fault_gpus={w: len(fault_gpus[w]) for w in ws},
                clean_gpus={w: len(ran[w] - fault_gpus[w]) for w in ws},
            )
        return out

    def _fleet(self, family: str, at: datetime, counted: list[str] | None = None) -> list[str]:
        """Open or update the fleet incident of `family`; returns the nodes with faults in the window
        (`counted`, when the caller knows them)."""
        p = self.p
        since = at - timedelta(seconds=p.fleet_window_s)
        nodes = counted if counted is not None else sorted(self.s.scalars(
            sa.select(FaultEvent.node).distinct().where(FaultEvent.family == family, FaultEvent.occurred_at >= since,
                                                        FaultEvent.occurred_at <= at)
        ).all())
        reason = fleet_burst(family, nodes, p)
        if reason is None:
            return nodes
        cluster = self.store.cluster
        row = self.s.scalars(sa.select(FleetIncident).where(FleetIncident.cluster == cluster,
                                                            FleetIncident.family == family,
                                                            FleetIncident.status == "open")).first()
        if row is not None and row.last_seen < since:
            row.status, row.resolved_at, row.updated_at = "resolved", self.now, self.now
            self.outbox.append(_fleet_message(row, "resolved", "a new burst started after the fleet window"))
            self.s.flush()
            row = None
        if row is None:
            row = FleetIncident(fleet_id=f"fleet:{cluster}:{family}@{at.strftime('%Y%m%dT%H%M%S.%fZ')}",
                                cluster=cluster, family=family, status="open", reason=reason, nodes=nodes,
                                first_seen=since, last_seen=at, updated_at=self.now, resolved_at=None)
            self.s.add(row)
            log.warning("fleet incident %s: %s", row.fleet_id, reason, extra={"family": family})
            self.outbox.append(_fleet_message(row, "opened", reason))
            return nodes
        merged = sorted(set(row.nodes) | set(nodes))
        row.last_seen = max(row.last_seen, at)
        row.updated_at = self.now
        if merged != sorted(row.nodes):
            row.nodes, row.reason = merged, reason
            self.outbox.append(_fleet_message(row, "updated", reason))
        return nodes


class _Draft:
    """A fault_events row of this batch, inserted in bulk at the end of the fault loop."""

    def __init__(self, **columns: Any) -> None:
        self.__dict__.update(columns)

    def __getattr__(self, name: str) -> Any:  # typed access for mypy; every column is set in __init__
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self.__dict__[name] = value


@dataclass(frozen=True, slots=True)
class _AppContext:
    count: int
    workloads: list[str]
    fault_gpus: dict[str, int]
    clean_gpus: dict[str, int]


@dataclass(slots=True)
class _Touched:
    row: Incident
    kind: str
    reason: str
    observations: list[FaultObservation] = field(default_factory=list)


def _other(source: str) -> str:
    return "nvml" if source == "kernel" else "kernel"


def _add_listed(row: Incident, attr: str, value: str | None) -> None:
    if not value:
        return
    current: list[Any] = list(getattr(row, attr) or [])
    if value not in current and len(current) < _MAX_LISTED:
        setattr(row, attr, [*current, value])


def _state(row: Incident) -> IncidentState:
    return IncidentState(
        incident_id=row.incident_id, fingerprint=row.fingerprint, node=row.node, gpu=row.gpu, family=row.family,
        status="open" if row.status == "open" else "resolved", count=row.count, first_seen=row.first_seen,
        last_seen=row.last_seen, category=row.category, reason=row.reason, codes=tuple(row.codes or ()),
        previous_incident_id=row.previous_incident_id, resolved_at=row.resolved_at,
        cordon_requested=row.cordon_requested,
    )


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _row_dict(row: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for col in row.__table__.columns:
        value = getattr(row, col.key)
        out[col.key] = _iso(value) if isinstance(value, datetime) else value
    return out


def incident_to_dict(row: Incident) -> dict[str, Any]:
    return _row_dict(row)


def _incident_message(row: Incident, change: str, reason: str) -> OutboxMessage:
    return OutboxMessage(
        idempotency_key=f"incident:{row.incident_id}:v{row.version}:{change}", stream="incidents", key=row.node,
        payload={"type": "incident", "change": change, "reason": reason, "incident": incident_to_dict(row)},
        created_at=utcnow(), sent_at=None,
    )


def _action_message(a: Any, row: Incident) -> OutboxMessage:
    body = action_to_dict(a)
    body.update({"family": row.family, "category": row.category, "gpu_uuid": row.gpu_uuid, "serial": row.serial,
                 "pci": row.pci, "count": row.count, "pods": list(row.pods or []),
                 "immediate_action": row.immediate_action})
    return OutboxMessage(idempotency_key=a.idempotency_key, stream="actions", key=row.node, payload=body,
                         created_at=utcnow(), sent_at=None)


def _fleet_message(row: FleetIncident, change: str, reason: str) -> OutboxMessage:
    return OutboxMessage(
        idempotency_key=f"{row.fleet_id}:{change}:{len(row.nodes)}:{_iso(row.resolved_at) or ''}",
        stream="incidents", key=row.cluster,
        payload={"type": "fleet_incident", "change": change, "reason": reason, "incident": _row_dict(row)},
        created_at=utcnow(), sent_at=None,
    )


def _insert_outbox(s: Session, rows: list[OutboxMessage]) -> list[OutboxMessage]:
    """Add the rows whose idempotency key is new (an action already requested is not requested again)."""
    if not rows:
        return []
    keys = [r.idempotency_key for r in rows]
    with s.no_autoflush:
        have = set(s.scalars(sa.select(OutboxMessage.idempotency_key)
                             .where(OutboxMessage.idempotency_key.in_(keys))))
    out: list[OutboxMessage] = []
    for r in rows:
        if r.idempotency_key in have:
            continue
        have.add(r.idempotency_key)
        s.add(r)
        out.append(r)
    s.flush()
    return out


def _outgoing(o: OutboxMessage) -> Outgoing:
    return Outgoing(o.id, o.stream, o.key, o.payload)


class Intake:
    """Input messages in, one transaction out: decode, parse (one kernel-log parser per node) and store.

    It runs where the store runs (see `AsyncStore`), so the stream's event loop only hands over the
    messages' bytes. A batch is decoded and parsed once: a retry of the same batch (after a transient
    database error) stores the same items, and the parsers see each line once.
    """

    def __init__(self, store: Store, kinds: dict[str, frozenset[str]]) -> None:
        self.store = store
        self.kinds = kinds
        self.ingest = Ingest()
        self._prepared: tuple[int, list[tuple[Message, list[Item]]], list[DeadLetter]] | None = None

    def ping(self) -> bool:
        return True

    def handle(self, batch_id: int, messages: Sequence[Message], sent: Sequence[int],
               per_message: bool = False) -> BatchResult:
        """Store the batch in one transaction (or, `per_message`, one per message, dead-lettering the
        messages that fail); database errors of the one transaction are raised for the caller to retry."""
        if self._prepared is None or self._prepared[0] != batch_id:
            self._prepared = (batch_id, *self._prepare(messages))
        _, prepared, dead = self._prepared
        if not prepared:  # nothing to store (lines that are no faults, dead letters): no transaction
            return BatchResult(dead_letters=list(dead), marked=False)
        if not per_message:
            res = self.store.process([i for _, its in prepared for i in its], sent=sent)
            res.dead_letters = list(dead)
            return res
        res = BatchResult(dead_letters=list(dead))
        if sent:
            self.store.mark_sent(sent)
        for msg, its in prepared:
            try:
                res.outgoing.extend(self.store.process(its).outgoing)
            except (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError):
                raise
            except Exception as exc:  # this message's records cannot be stored: keep it, say why, go on
                log.exception("message %s[%d]@%d could not be stored", msg.topic, msg.partition, msg.offset)
                res.dead_letters.append(_dead(msg, "processing_error", f"{type(exc).__name__}: {exc}"))
        return res

    def _prepare(self, messages: Sequence[Message]) -> tuple[list[tuple[Message, list[Item]]], list[DeadLetter]]:
        prepared: list[tuple[Message, list[Item]]] = []
        dead: list[DeadLetter] = []
        for msg in messages:
            rec = decode_message(topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key,
                                 value=msg.value, kinds=self.kinds.get(msg.topic, frozenset()))
            if isinstance(rec, DeadLetter):
                dead.append(rec)
                continue
            try:
                items = self.ingest.items(rec, msg.topic)
            except Exception as exc:  # a record the pure code cannot handle: keep it, say why, go on
                log.exception("record %s of %s could not be mapped", rec.record_id, rec.node)
                dead.append(_dead(msg, "processing_error", f"{type(exc).__name__}: {exc}"))
                continue
            if items:
                prepared.append((msg, items))
        return prepared, dead

    def flush_idle(self, idle_s: float) -> BatchResult:
        """Store the kernel records of nodes quiet for `idle_s` seconds (see `Ingest.flush_idle`)."""
        items = self.ingest.flush_idle(idle_s)
        return self.store.process(items) if items else BatchResult()

    def flush_all(self, sent: Sequence[int]) -> int:
        """At shutdown: store every open kernel record; returns how many items were stored."""
        items = self.ingest.flush_all()
        if items:
            self.store.process(items, sent=sent)
        elif sent:
            self.store.mark_sent(sent)
        return len(items)

    def create_schema(self) -> None:
        self.store.create_schema()

    def sweep(self) -> list[Outgoing]:
        return self.store.sweep()

    def unsent(self, older_than_s: float) -> list[Outgoing]:
        return self.store.unsent(older_than_s)

    def mark_sent(self, ids: Sequence[int]) -> None:
        self.store.mark_sent(ids)

    def dispose(self) -> None:
        self.store.dispose()


def _dead(msg: Message, reason: str, error: str) -> DeadLetter:
    return DeadLetter(reason, error[:2000], msg.topic, msg.partition, msg.offset, msg.key, msg.value)


class StoreUnavailable(Exception):
    """The store's process died; a new one is started, and the call can be retried."""


class AsyncStore:
    """The intake and store for the event loop, which only awaits.

    By default they run in a process of their own, started with the worker: decoding, parsing and
    the database work then run on another core than the stream, which CPython's one-thread-at-a-time
    interpreter would otherwise share between them. With `process=False` they run on one thread of
    the calling process. Either way one call runs at a time, in the order made. A store process
    that dies is replaced; the call it was running raises `StoreUnavailable` and can be retried (its
    transaction was rolled back).
    """

    def __init__(self, url: str, policy: PipelinePolicy | None = None, cluster: str = "default", *,
                 kinds: dict[str, frozenset[str]] | None = None, process: bool = True,
                 log_level: int = logging.INFO) -> None:
        self._args = (url, (policy or PipelinePolicy()).model_dump(mode="json"), cluster, dict(kinds or {}),
                      log_level)
        self._process = process
        self.intake: Intake | None = None if process else Intake(Store(url, policy, cluster), dict(kinds or {}))
        self._executor: Executor = self._new_executor()

    def _new_executor(self) -> Executor:
        if not self._process:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="xidpipe-db")
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_store_process, initargs=self._args)

    async def _run(self, method: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        if self.intake is not None:
            return await loop.run_in_executor(self._executor, getattr(self.intake, method), *args)
        executor = self._executor
        try:
            return await loop.run_in_executor(executor, _call_intake, method, args)
        except BrokenProcessPool as exc:
            if executor is self._executor:
                log.error("the store process died; starting another")
                executor.shutdown(wait=False)
                self._executor = self._new_executor()
            raise StoreUnavailable("the store process died") from exc

    async def start(self) -> None:
        """Start the store process now rather than at the first call."""
        await self._run("ping")

    async def handle(self, batch_id: int, messages: Sequence[Message], sent: Sequence[int] = (),
                     per_message: bool = False) -> BatchResult:
        result: BatchResult = await self._run("handle", batch_id, list(messages), list(sent), per_message)
        return result

    async def flush_idle(self, idle_s: float) -> BatchResult:
        result: BatchResult = await self._run("flush_idle", idle_s)
        return result

    async def flush_all(self, sent: Sequence[int] = ()) -> int:
        n: int = await self._run("flush_all", list(sent))
        return n

    async def create_schema(self) -> None:
        await self._run("create_schema")

    async def sweep(self) -> list[Outgoing]:
        out: list[Outgoing] = await self._run("sweep")
        return out

    async def unsent(self, older_than_s: float) -> list[Outgoing]:
        out: list[Outgoing] = await self._run("unsent", older_than_s)
        return out

    async def mark_sent(self, ids: Sequence[int]) -> None:
        await self._run("mark_sent", list(ids))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self.intake is not None:
            self.intake.dispose()


_PROCESS_INTAKE: Intake | None = None  # in the store process: the one Intake


def _start_store_process(url: str, policy: dict[str, Any], cluster: str, kinds: dict[str, frozenset[str]],
                         log_level: int) -> None:
    """In the store process: die with the worker, leave signals to it, log like it, open the store."""
    import os
    import signal
    import sys

    global _PROCESS_INTAKE
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker stops on them, then ends this process
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the worker was gone before the line above
            os._exit(1)
    logging.basicConfig(level=log_level, format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    _PROCESS_INTAKE = Intake(Store(url, PipelinePolicy.model_validate(policy), cluster), kinds)


def _call_intake(method: str, args: tuple[Any, ...]) -> Any:
    assert _PROCESS_INTAKE is not None
    return getattr(_PROCESS_INTAKE, method)(*args)
