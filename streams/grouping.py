"""The grouping engine (`models.grouping`) run on one transaction's incident rows.

Faults are attributed with the node state valid at their time (`models.correlate`), kernel and
NVML reports of one fault are merged (`streams.pairing`), the incident rows the reports can change
are locked and read (`streams.incident_lookup`), and each report is grouped by the engine and its
decision written to the rows; at the end application faults that stay with their GPU move to its
incident (`streams.regroup`), incidents are classified with what SQL says of their workloads
(`streams.classify_inputs`), fleet bursts are counted (`streams.fleet`), and the messages to
publish are collected for the outbox of the same transaction (`models.actions`, `models.repeats`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_index import IncidentIndex
from history.incident_rows import add_listed, incident_state, lock_open
from history.tables import FaultEvent, Incident, OutboxMessage
from models.actions import action_requests
from models.correlate import Attribution, correlate
from models.decisive_action import decisive_of_stored
from models.fleet import fleet_fingerprint
from models.grouping import (
    AppContext,
    Grouper,
    Report,
    in_grouping_order,
    incident_verdict,
    report_of,
    window_start,
)
from models.identity import Component, gpu_key, signal
from models.incidents import FaultObservation, IncidentChange, IncidentState
from models.pci import normalize_pci
from models.port_reports import tie_port_report
from models.repeats import publish_change
from models.stream_policy import PipelinePolicy
from models.vocabulary import ComponentKind
from streams.app_windows import AppWindows
from streams.classify_inputs import application_contexts, driver_versions, workload_spreads
from streams.event_clock import NodeClocks, quiet_incidents
from streams.fault_rows import EventDraft, FaultEventWriter, event_draft
from streams.fleet import FleetBursts
from streams.incident_lookup import RowLookup
from streams.node_history import HistoryCache, NodeHistories, history_cache
from streams.outbox import action_message, incident_message, insert_outbox
from streams.pairing import PartnerKey, merge, other_source, partner_candidates
from streams.regroup import move_to_gpu, move_to_workload

log = logging.getLogger(__name__)

_UPDATES_REMEMBERED = 100_000  # incidents whose last update time is kept, at most
_REPAIRED_PER_NODE = 5000  # recent unattributed faults a node's late state attributes, at most, per batch


@dataclass(slots=True)
class StoreCaches:
    """What one batch leaves for the next, in the store's process."""

    histories: HistoryCache = field(default_factory=history_cache)  # the nodes that faulted last (LRU)
    # Per incident published within the last update interval: when (monotonic), oldest first. An older
    # time holds no repeat back, so it is dropped: the map holds the incidents of the last interval.
    updates_sent: OrderedDict[str, float] = field(default_factory=OrderedDict)
    fault_events: FaultEventWriter = field(default_factory=FaultEventWriter)
    clocks: NodeClocks = field(default_factory=NodeClocks)  # the nodes' event-time clocks (`streams.event_clock`)

    def forget_uncommitted(self) -> None:
        """After a rollback: the node histories and clocks may hold what the transaction read or wrote."""
        self.histories.clear()
        self.clocks.clear()


@dataclass(slots=True)
class _Touched:
    row: Incident
    kind: str
    reason: str
    observations: list[FaultObservation] = field(default_factory=list)


class IncidentGrouping:
    """The grouping engine on one transaction's incident rows (session `s`); `now` is the batch's arrival time."""

    def __init__(self, s: Session, policy: PipelinePolicy, cluster: str, caches: StoreCaches, now: datetime) -> None:
        self.s = s
        self.p = policy
        self.caches = caches
        self.now = now
        self.faults_stored = 0
        self.faults_merged = 0
        self.incidents: dict[str, Incident] = {}  # by fingerprint, the latest row
        self.touched: dict[str, _Touched] = {}  # by incident id
        self.outbox: list[OutboxMessage] = []
        self.index = IncidentIndex()  # the (incident, code) and (incident, namespace) pairs of this batch
        self.fleet = FleetBursts(s, policy, cluster, now)
        self.histories = NodeHistories(s, caches.histories, policy.history_s)
        # Per incident grouped in this batch: its state after the faults so far, written to the row once
        # (`_write_back`) instead of after every fault.
        self.states: dict[str, IncidentState] = {}
        self.lookup = RowLookup(s, self.incidents, self.states)
        self.grouper = Grouper(self.lookup, policy)
        self.repaired: list[tuple[str, str, datetime]] = []  # (node, GPU, time) of faults late state gave a workload
        self.update_interval = timedelta(seconds=policy.update_interval_s)
        self.latest: dict[str, datetime] = {}  # per node: its latest fault of this batch (its clock, at the end)
        self.drafts: list[EventDraft] = []  # fault_events rows grouped, not inserted yet
        self.partners: dict[PartnerKey, list[Any]] = {}
        self._pending: list[tuple[Report, FaultObservation, Attribution]] = []  # the batch's faults not grouped yet

    def faults(self, faults: list[FaultObservation]) -> None:
        """Group the batch's faults in event time (`models.grouping.in_grouping_order`), each as a batch of
        that one fault would: every decision that reads other faults reads those before it."""
        if not faults:
            return
        by_node: dict[str, list[FaultObservation]] = defaultdict(list)
        for f in faults:
            by_node[f.node].append(f)
        attributed: list[tuple[Report, FaultObservation, Attribution]] = []
        self.histories.load_tops(set(by_node))
        for node, node_faults in by_node.items():
            history = self.histories.since(node, min(o.occurred_at for o in node_faults))
            skew = self.p.clock_skew_s
            for o in node_faults:
                o = tie_port_report(o, history, o.occurred_at, skew)  # a root port's AER report: the GPU below
                attr = correlate(history, o.occurred_at, pci=o.pci, gpu_uuid=o.gpu_uuid,
                                 gpu_instance_id=o.gpu_instance_id, pid=o.pid, process=o.process, skew_s=skew)
                attributed.append((report_of(o, attr), o, attr))
            kernel = [o.occurred_at for o in node_faults if o.source == "kernel"]
            if kernel:  # the node's clock: its kernel log, read in the order written (not NVML's topic)
                self.latest[node] = max(kernel)
        self._lock(attributed)
        window_s = self.p.duplicate_window_s
        ordered = in_grouping_order(attributed, lambda t: t[0], self.p.occurrence_window_s)
        self.partners = partner_candidates(self.s, [(o, a) for _, o, a in ordered], window_s)
        self.lookup.prefetch(r for r, _, _ in ordered)
        apps = AppWindows(self.s, self.p)
        windows = apps.load((o.node, event_gpu(o, a), a.workload, o.occurred_at)
                            for _, o, a in ordered if o.family == "application")
        app_index = 0
        for i, (report, obs, attr) in enumerate(ordered):
            entry = windows.get(app_index) if obs.family == "application" else None
            app_index += obs.family == "application"
            self._pending = ordered[i + 1:]
            key = (obs.node, attr.gpu.uuid, obs.xid)
            pairable = obs.xid is not None and attr.gpu.uuid is not None
            if pairable and merge(self.s, obs, attr, self.partners.get((*key, other_source(obs.source)), []),
                                  window_s):
                self.faults_merged += 1
                continue
            draft = event_draft(obs, attr, self.now)
            if entry is not None and report.workload and entry.gpu != "node" and apps.keeps_only(entry):
                report = replace(report, workload=None)  # the GPU keeps it: its incident, as a move would
            placed = self._group(report, obs, attr, draft)
            self.drafts.append(draft)
            if pairable:
                self.partners.setdefault((*key, obs.source), []).append(draft)
            self.faults_stored += 1
            if entry is not None:
                entry.counted, entry.in_gpu = bool(draft.counted), placed.kind == "gpu"
            if placed.kind == "workload" and draft.gpu != "node":
                self._keep_with_gpu(apps, obs.node, draft.gpu, obs.occurred_at)
        self._pending = []
        self._flush_drafts()

    def _flush_drafts(self) -> None:
        """Write the incident states grouped so far to their rows and insert the fault events grouped so far
        (one executemany): SQL then holds the batch up to here. The rows are read again from then on."""
        self._write_back()
        self.states.clear()
        if not self.drafts:
            return
        self.caches.fault_events.insert(self.s, [d.__dict__ for d in self.drafts])
        flushed = {(d.node, d.gpu_uuid, d.xid, d.sources) for d in self.drafts}
        self.drafts = []
        # The inserted rows are no drafts any more: the partners of the faults still to come are read
        # again, when one of those may pair with one of them (a kernel line and its NVML event).
        if any((o.node, a.gpu.uuid, o.xid, other_source(o.source)) in flushed for _, o, a in self._pending):
            self.partners = partner_candidates(self.s, [(o, a) for _, o, a in self._pending],
                                               self.p.duplicate_window_s)
        else:
            self.partners = {k: [c for c in v if not isinstance(c, EventDraft)] for k, v in self.partners.items()}

    def _lock(self, attributed: list[tuple[Report, FaultObservation, Attribution]]) -> None:
        """Lock the open incidents the reports can change before reading them (`lock_open`: another
        worker may be changing them): their components' (a workload's spans partitions), the GPU
        incidents of their nodes (a node-level report or a workload's fault may join one), and the
        fleet incidents of their families."""
        wanted: set[str] = set()
        for report, obs, _ in attributed:
            wanted.add(report.component.fingerprint)
            if obs.family in self.p.fleet_families:
                wanted.add(fleet_fingerprint(self.fleet.cluster, obs.family))
        for row in lock_open(self.s, wanted, gpus_of={obs.node for _, obs, _ in attributed}):
            self.incidents.setdefault(row.fingerprint, row)

    def repair(self, late: dict[str, datetime]) -> None:
        """Attribute recent faults that state arriving now (read after them) is valid for."""
        if not late:
            return
        recent = self.now - timedelta(seconds=self.p.late_state_s)
        skew = self.p.clock_skew_s
        repaired: dict[str, Incident] = {}
        found: dict[str, list[FaultEvent]] = defaultdict(list)
        to_workloads: dict[str, list[FaultEvent]] = defaultdict(list)
        # One query for the batch's nodes, of one shape whatever their number (an expanding IN, not an
        # OR per node: each distinct OR would be compiled and cached on its own); each node's own
        # validity bound is applied here.
        since = {node: valid_from - timedelta(seconds=skew) for node, valid_from in late.items()}
        for r in self.s.scalars(sa.select(FaultEvent).where(
            FaultEvent.ingested_at >= recent,
            FaultEvent.node.in_(list(late)),
            FaultEvent.occurred_at >= min(since.values()),
            sa.or_(FaultEvent.gpu_uuid.is_(None), FaultEvent.pod.is_(None)),
        ).order_by(FaultEvent.occurred_at, FaultEvent.id).limit(_REPAIRED_PER_NODE * len(late))):
            if r.occurred_at >= since[r.node] and len(found[r.node]) < _REPAIRED_PER_NODE:
                found[r.node].append(r)
        for node in late:
            rows = found.get(node)
            if not rows:
                continue
            history = self.histories.since(node, min(r.occurred_at for r in rows))
            for r in rows:
                attr = correlate(history, r.occurred_at, pci=r.pci, gpu_uuid=r.gpu_uuid, pid=r.pid,
                                 process=r.process, skew_s=skew)
                if not ((r.gpu_uuid is None and attr.gpu.uuid) or (r.pod is None and attr.pod.pod)):
                    continue
                g, p = attr.gpu, attr.pod
                if r.gpu_uuid is None and g.uuid and r.gpu == r.pci:
                    r.gpu = g.uuid  # the GPU as a report naming it records it (`models.identity.gpu_key`)
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
                if inc.component != "nvswitch":
                    inc.gpu_uuid, inc.serial = inc.gpu_uuid or g.uuid, inc.serial or g.serial
                pod = f"{p.namespace}/{p.pod}/{p.container}" if p.pod else None
                add_listed(inc, "pods", pod)
                add_listed(inc, "affected" if r.sympathetic else "workloads", pod if r.sympathetic else attr.workload)
                if p.pod and attr.workload and _grouped_without_pod(r, inc):
                    to_workloads[attr.workload].append(r)
        self._to_workloads(to_workloads)
        for inc in repaired.values():
            if inc.status != "open":
                continue  # merged into a workload's incident: its resolution is published
            inc.version += 1
            log.info("incident %s attributed by late node state", inc.incident_id,
                     extra={"node": inc.node, "gpu": inc.gpu_uuid, "incident": inc.incident_id})
            self.outbox.append(incident_message(inc, "attributed", "node state read after the fault attributes it"))

    def _to_workloads(self, events: dict[str, list[FaultEvent]]) -> None:
        """Application faults grouped on their GPU because their pod was not known yet join their
        workloads' incidents, as if the node state had been read first (`streams.regroup`); the GPUs
        are then checked for faults that stay with them (`_keep_repaired`)."""
        if not events:
            return
        comps = {w: Component(ComponentKind.WORKLOAD, "", w) for w in events}
        for row in lock_open(self.s, [c.fingerprint for c in comps.values()]):
            self.incidents.setdefault(row.fingerprint, row)
        for workload in sorted(events):
            comp = comps[workload]
            row = move_to_workload(self.s, workload, events[workload], row=self.lookup.latest_row(comp.fingerprint),
                                   now=self.now, policy=self.p, on_merged=self._merged)
            new = self.incidents.get(comp.fingerprint) is not row
            self.incidents[comp.fingerprint] = row
            if row.incident_id not in self.touched:
                self.touched[row.incident_id] = _Touched(
                    row, "opened" if new else "updated", "node state read after the faults names their pods: "
                    f"they are workload {workload}'s")
            self.repaired.extend((e.node, e.gpu, e.occurred_at) for e in events[workload])

    def _group(self, report: Report, obs: FaultObservation, attr: Attribution, event: EventDraft) -> Component:
        """Group one report with the engine (`models.grouping.Grouper`) and write what it decided; returns
        the component it went to."""
        node, family = obs.node, obs.family
        placed, change = self.grouper.group(report)
        comp = placed.component
        if comp.kind == "gpu" and event.gpu == "node":
            event.gpu = comp.id  # a node-level report of a GPU fault
        row = self.lookup.row(placed.current.incident_id) if placed.current is not None else None
        if change.resolved_previous is not None and row is not None:
            self._resolve(row, change.resolved_previous.resolved_at or self.now, change.reason)
        inc = change.incident
        if change.kind in ("opened", "reopened"):
            if change.resolved_previous is not None:
                self.s.flush()  # the resolved row first: one open incident per fingerprint
            row = self._new_row(comp, obs, attr, change)
            self.s.add(row)
            log.info("incident %s %s: %s", inc.incident_id, change.kind, change.reason,
                     extra={"node": node, "gpu": inc.gpu, "xid": obs.xid, "incident": inc.incident_id})
        assert row is not None
        _fill_in(row, obs, attr, affected=placed.sympathetic is not None)
        if placed.sympathetic is not None:
            event.sympathetic = True
            log.info("%s on %s is a sympathetic report: %s", obs.code, row.incident_id, placed.sympathetic,
                     extra={"node": node, "gpu": row.gpu, "xid": obs.xid, "incident": row.incident_id})
        # Count, first and last seen, codes: written to the row by `_write_back`; its GPU's UUID as the
        # row knows it now, for the next report's look-up.
        self.states[row.incident_id] = inc if inc.gpu_uuid == row.gpu_uuid else replace(inc, gpu_uuid=row.gpu_uuid)
        self.incidents[comp.fingerprint] = self.incidents[row.fingerprint] = row
        event.incident_id, event.counted = row.incident_id, change.counted
        if change.counted and comp.kind == "gpu":
            self.lookup.note_occurrence(node, obs.occurred_at, row.incident_id,
                                        signal(family, obs.source, obs.code, placed.group))
        self.index.add(row.incident_id, obs.code, obs.xid, attr.pod.namespace)
        t = self.touched.get(row.incident_id)
        if t is None:
            t = self.touched[row.incident_id] = _Touched(row, change.kind, change.reason)
        t.observations.append(obs)
        self.fleet.note(family, node, obs.occurred_at, obs.code)
        return comp

    def _resolve(self, row: Incident, at: datetime, reason: str) -> None:
        """Resolve an open incident (quiet for its quiet period: `at` is when that ended, in event time).
        A change this batch made to it is published first: an incident opened and resolved in one batch
        still asks for its ticket, message and cordon, as it would in two."""
        if row.incident_id in self.touched:
            self._flush_drafts()  # its state, and what classification reads of this batch's faults
            self._emit([self.touched.pop(row.incident_id)])
        self.states.pop(row.incident_id, None)
        row.status, row.resolved_at, row.updated_at = "resolved", at, self.now
        row.version += 1
        log.info("incident %s resolved: %s", row.incident_id, reason,
                 extra={"node": row.node, "gpu": row.gpu, "incident": row.incident_id})
        self.outbox.append(incident_message(row, "resolved", reason))
        change = IncidentChange("resolved", incident_state(row), reason)
        self.outbox.extend(action_message(a, row) for a in action_requests(change, version=row.version))

    def _new_row(self, comp: Component, obs: FaultObservation, attr: Attribution, change: IncidentChange) -> Incident:
        inc = change.incident
        return Incident(
            incident_id=inc.incident_id, fingerprint=inc.fingerprint, node=obs.node, gpu=inc.gpu, family=obs.family,
            status="open", category=obs.category or "unknown", reason=change.reason, count=1,
            first_seen=inc.first_seen, last_seen=inc.last_seen, opened_at=self.now, updated_at=self.now,
            resolved_at=None, previous_incident_id=inc.previous_incident_id, codes=list(inc.codes), pods=[],
            processes=[], workloads=[], immediate_action=obs.immediate_action,
            investigatory_action=obs.investigatory_action, description=obs.description, cordon_requested=False,
            version=1, component=comp.kind, component_id=comp.id, occurrence_at=inc.occurrence_at,
            occurrence_signals=list(inc.occurrence_signals), catalog_version=obs.catalog_version,
            occurrence_pids=list(inc.occurrence_pids), recovery_action=inc.recovery_action, affected=[],
            **_identity(comp, obs, attr),
        )

    def _write_back(self) -> None:
        """Put the incident states grouped so far on their rows (one set of attribute writes per incident)."""
        for incident_id, st in self.states.items():
            t = self.touched.get(incident_id)
            row = t.row if t is not None else None
            if row is None or row.status != "open":
                continue
            if row.count != st.count or row.last_seen != st.last_seen or row.first_seen != st.first_seen:
                row.count, row.last_seen, row.first_seen = st.count, st.last_seen, st.first_seen
                row.updated_at = self.now
            if tuple(row.codes or ()) != st.codes:
                row.codes = list(st.codes)
            if row.family != st.family:
                row.family = st.family
            if row.occurrence_at != st.occurrence_at or tuple(row.occurrence_signals or ()) != st.occurrence_signals:
                row.occurrence_at, row.occurrence_signals = st.occurrence_at, list(st.occurrence_signals)
            if tuple(row.occurrence_pids or ()) != st.occurrence_pids:
                row.occurrence_pids = list(st.occurrence_pids)
            if row.recovery_action != st.recovery_action:
                row.recovery_action = st.recovery_action

    def finish(self) -> None:
        # Fault events are inserted and node state flushed already: classification queries need nothing
        # else, so the incidents' changes are flushed once, with the outbox.
        self._keep_repaired()
        self._resolve_by_clocks()
        self._emit(list(self.touched.values()))
        self.touched.clear()
        self.outbox.extend(self.fleet.count())
        self.index.write(self.s)
        self.outbox = insert_outbox(self.s, self.outbox)

    def _contexts(self, rows: list[Incident]) -> dict[str, AppContext]:
        """What the incidents' workloads did (`streams.classify_inputs`), each within its own window."""
        contexts = application_contexts(self.s, [r for r in rows if r.family == "application"
                                                 and r.component == "gpu"], self.p.classify_window_s)
        contexts.update(workload_spreads(self.s, [r for r in rows if r.component == "workload"]))
        return contexts

    def _emit(self, touched: list[_Touched]) -> None:
        """Classify and publish incidents' changes now (before they are resolved in the same batch)."""
        rows = [t.row for t in touched]
        with self.s.no_autoflush:
            contexts = self._contexts(rows)
            drivers = driver_versions(self.s, rows)
        for t in touched:
            t.row.driver_version = drivers.get(t.row.incident_id, t.row.driver_version)
            self._classify_and_emit(t, contexts.get(t.row.incident_id))

    def _resolve_by_clocks(self) -> None:
        """Resolve what the nodes' clocks, moved by this batch's faults, show quiet (`streams.event_clock`)."""
        if not self.latest:
            return
        self.s.flush()  # the incidents this batch opened are among those to look at
        clocks = self.caches.clocks
        advanced = clocks.advance(self.s, self.latest)
        quiet = timedelta(seconds=self.p.quiet_period_s)
        rows = quiet_incidents(self.s, clocks, {n: advanced[n] for n in self.latest}, self.p.quiet_period_s)
        self._emit([t for r in rows if (t := self.touched.pop(r.incident_id, None)) is not None])
        for row in rows:
            self._resolve(row, row.last_seen + quiet, f"no new fault for {self.p.quiet_period_s:.0f} s (the quiet "
                                                      f"period) in event time: its last at {row.last_seen.isoformat()}")

    def _keep_with_gpu(self, apps: AppWindows, node: str, gpu: str, at: datetime) -> None:
        """After an application fault of a workload on (node, GPU) at `at`: the faults within the window
        ending there of the workloads the GPU keeps (`models.grouping.kept_workloads`) move to the GPU's
        incident (`streams.regroup`): its open one unless that went quiet before them, else a new one."""
        workloads = apps.kept(node, gpu, at)
        if not workloads:
            return
        self._flush_drafts()
        comp = Component(ComponentKind.GPU, node, gpu)
        current = self.lookup.latest_row(comp.fingerprint)
        quiet = timedelta(seconds=self.p.quiet_period_s)
        if current is not None and current.status == "open" and at - current.last_seen > quiet:
            # Quiet for its quiet period by then, in event time: over (its node's clock resolves it
            # at the end of the batch anyway); the faults open a new one.
            self._resolve(current, current.last_seen + quiet, f"no new fault for {self.p.quiet_period_s:.0f} s "
                                                              "before the GPU's next faults")
        row = move_to_gpu(self.s, node, gpu, workloads, row=current, since=window_start(at, self.p), until=at,
                          now=self.now, policy=self.p, on_merged=self._merged)
        apps.moved(node, gpu, at)
        if row is None:
            return
        self.incidents[comp.fingerprint] = row
        if row.incident_id not in self.touched:
            kind = "opened" if row is not current else "updated"
            self.touched[row.incident_id] = _Touched(row, kind, f"application faults on {gpu} stay with the "
                                                     f"GPU across workloads {', '.join(workloads)}")

    def _keep_repaired(self) -> None:
        """The GPUs of faults late node state gave a workload (`repair`), asked at each of them."""
        if not self.repaired:
            return
        apps = AppWindows(self.s, self.p)
        with self.s.no_autoflush:
            apps.load_stored({(n, g) for n, g, _ in self.repaired}, set(), min(t for *_, t in self.repaired),
                             max(t for *_, t in self.repaired))
        for node, gpu, at in sorted(self.repaired, key=lambda r: r[2]):
            self._keep_with_gpu(apps, node, gpu, at)

    def _merged(self, row: Incident, reason: str) -> None:
        self.touched.pop(row.incident_id, None)
        self.states.pop(row.incident_id, None)
        self.outbox.append(incident_message(row, "resolved", reason))

    def _classify_and_emit(self, t: _Touched, context: AppContext | None) -> None:
        row = t.row
        v = incident_verdict(incident_state(row), pci=row.pci, workloads=row.workloads or (),
                             observations=t.observations, app=context, policy=self.p)
        kind, reason = t.kind, t.reason
        if kind == "updated" and v.category != row.category:
            kind, reason = "reclassified", f"{row.category} → {v.category}: {v.reason}"
        elif kind == "updated":
            last = t.observations[-1].code if t.observations else (row.codes or ["?"])[-1]
            reason = f"{row.count} faults; last {last}"
        row.category, row.reason, row.rule = v.category, v.reason, v.rule
        _nvidia_action(row)
        row.catalog_version = next((o.catalog_version for o in reversed(t.observations) if o.catalog_version),
                                   row.catalog_version)
        if kind != "opened" and kind != "reopened":
            row.version += 1
        change = IncidentChange(kind, incident_state(row), reason)  # type: ignore[arg-type]
        # A repeat is published at most once per update interval (a storm updates the row every batch);
        # every other change at once. The cordon candidate (every change offers one) goes to the
        # responder at once either way.
        sent = self.caches.updates_sent
        now = time.monotonic()
        last = sent.get(row.incident_id)
        published = publish_change(kind, None if last is None else timedelta(seconds=now - last), self.update_interval)
        if published:
            sent[row.incident_id] = now
            sent.move_to_end(row.incident_id)
            expired = now - self.p.update_interval_s
            while sent and (len(sent) > _UPDATES_REMEMBERED or next(iter(sent.values())) <= expired):
                sent.popitem(last=False)
            self.outbox.append(incident_message(row, kind, reason))
        actions = action_requests(change, version=row.version, repeat_published=published)
        self.outbox.extend(action_message(a, row) for a in actions)


def _grouped_without_pod(event: FaultEvent, incident: Incident) -> bool:
    """Whether an application fault whose pod is known only now sits in a GPU incident it opened for
    want of one: an open application incident of the GPU, not (yet) suspected to be the GPU's."""
    return (event.family == "application" and incident.component == "gpu" and incident.status == "open"
            and incident.family == "application" and incident.category != "suspected_hardware")


def _nvidia_action(row: Incident) -> None:
    """The incident's NVIDIA action and its catalog text: its decisive code's (`models.decisive_action`),
    not its first code's."""
    found = decisive_of_stored(row.codes or ())
    if found is not None:
        row.immediate_action, row.description = found.action, found.info.description
        row.investigatory_action = found.info.investigatory_action


def _identity(comp: Component, obs: FaultObservation, attr: Attribution) -> dict[str, str | None]:
    """The GPU identity columns of a new incident: its GPU's (for a workload's, the GPU it first faulted
    on), an NVSwitch's address."""
    if comp.kind == "nvswitch":
        return {"gpu_uuid": None, "serial": None, "pci": comp.id}
    return {"gpu_uuid": attr.gpu.uuid, "serial": attr.gpu.serial, "pci": attr.gpu.pci or normalize_pci(obs.pci)}


def _fill_in(row: Incident, obs: FaultObservation, attr: Attribution, *, affected: bool = False) -> None:
    """What the row does not know yet and this fault tells: GPU identity, catalog text, pods, processes;
    the workload of a sympathetic report (`affected`) is listed as affected, not among its workloads."""
    if row.component != "nvswitch":
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
    add_listed(row, "pods", f"{attr.pod.namespace}/{attr.pod.pod}/{attr.pod.container}" if attr.pod.pod else None)
    process = f"{attr.process.process or '?'}[{attr.process.pid}]" if attr.process.pid is not None else None
    add_listed(row, "processes", process)
    if affected:
        pod = f"{attr.pod.namespace}/{attr.pod.pod}/{attr.pod.container}" if attr.pod.pod else None
        add_listed(row, "affected", pod or process or attr.workload)
        return
    add_listed(row, "workloads", attr.workload)


def event_gpu(obs: FaultObservation, attr: Attribution) -> str:
    """The GPU a report is about as its fault event records it (`models.identity.gpu_key`)."""
    return gpu_key(attr.gpu.uuid, attr.gpu.pci or normalize_pci(obs.pci))
