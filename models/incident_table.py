"""Incidents in memory: the table `xidpipe scan` runs the grouping engine on.

It plays the part the stream's transaction plays with its incident rows (`streams.grouping`): it
answers the engine's look-ups (`models.grouping.IncidentLookup`), applies each `IncidentChange` the
engine decides (resolve the incident a recurrence follows, open one, count a report), moves
application faults that stay with their GPU into the GPU's incident at each application fault and
counts the incidents they left again (`models.grouping.kept_workloads`, `recount_events`), and
classifies every incident with what its workloads did within the window that ends at its last
fault (`models.grouping.incident_verdict`). What the stream reads from SQL for those decisions
(`streams.classify_inputs`, `streams.app_windows`) is computed here from the table's own reports.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from models.correlate import Attribution
from models.decisive_action import decisive_of_stored
from models.grouping import (
    AppContext,
    AppFault,
    Occurrence,
    Placement,
    Report,
    incident_verdict,
    kept_workloads,
    recount_events,
    window_start,
)
from models.identity import Component, signal
from models.incidents import FaultObservation, IncidentChange, IncidentState, component_gpu, new_incident_id
from models.kernlog.record import FaultRecord
from models.pci import normalize_pci
from models.stream_policy import PipelinePolicy
from models.vocabulary import ComponentKind

MAX_LISTED = 20  # codes, pods, processes, workloads listed on one incident (as the stream lists them)


@dataclass(slots=True)
class ScanEvent:
    """One fault report in its incident (the stream's fault_events row)."""

    seq: int  # its place in the input
    record: FaultRecord
    observation: FaultObservation
    attribution: Attribution
    report: Report
    gpu: str  # the GPU as events record it (`models.identity.gpu_key`); a node-level report's, its GPU fault's
    when: str | None = None  # its time as the scan shows it: its own stamp, its uptime, or the uptime's wall clock
    incident_id: str = ""
    counted: bool = True  # it counted an occurrence (False: another view of the one before)
    sources: str = "kernel"
    order: int = 0  # the order it was grouped in (the stream's fault_events id): ties in time keep it
    affected: bool = False  # a sympathetic report of its incident's hardware fault: its workload was affected

    @property
    def node(self) -> str:
        return self.observation.node

    @property
    def occurred_at(self) -> datetime:
        return self.observation.occurred_at

    @property
    def code(self) -> str:
        return self.observation.code

    @property
    def family(self) -> str:
        return self.observation.family

    @property
    def workload(self) -> str | None:
        return self.attribution.workload


@dataclass(frozen=True, slots=True)
class Assignment:
    """A GPU allocated to a workload, from the time a pod assignment record says so."""

    node: str
    gpu: str
    workload: str
    at: datetime


@dataclass(slots=True)
class ScanIncident:
    """An incident as the scan reports it: its state (`models.incidents.IncidentState`), its reports
    and its verdict."""

    state: IncidentState
    pci: str | None = None
    serial: str | None = None
    events: list[ScanEvent] = field(default_factory=list)
    observations: list[FaultObservation] = field(default_factory=list)  # the reports grouped into it
    category: str = "unknown"
    reason: str = ""
    rule: str = ""
    merged_into: str | None = None

    @property
    def host(self) -> str:
        return self.state.node

    @property
    def gpu(self) -> str:
        return self.state.gpu

    @property
    def gpu_uuid(self) -> str | None:
        return self.state.gpu_uuid

    @property
    def family(self) -> str:
        return self.state.family

    @property
    def count(self) -> int:
        return self.state.count

    @property
    def fingerprint(self) -> str:
        return self.state.fingerprint

    @property
    def component(self) -> str:
        return self.state.component

    @property
    def records(self) -> list[FaultRecord]:
        """Its records in time order."""
        return [e.record for e in _in_time_order(self.events)]

    def codes(self) -> list[str]:
        return list(self.state.codes)

    def to_dict(self) -> dict[str, Any]:
        events = _in_time_order(self.events)
        first, last = events[0].record, events[-1].record
        processes: dict[str, None] = {}
        for r in (e.record for e in events):
            if r.pid is not None or r.process:
                processes[f"{r.process or '?'}[{r.pid if r.pid is not None else '?'}]"] = None
        actions: dict[str, None] = {e.record.immediate_action: None for e in events if e.record.immediate_action}
        decisive = decisive_of_stored(self.state.codes)
        return {
            "fingerprint": self.fingerprint,
            "component": self.component,
            "component_id": self.state.component_id,
            "host": self.host,
            "gpu": self.gpu,
            "pci": self.pci,
            "gpu_uuid": self.gpu_uuid,
            "serial": self.serial,
            "family": self.family,
            "category": self.category,
            "reason": self.reason,
            "rule": self.rule,
            "status": self.state.status,
            "count": self.count,
            "codes": self.codes(),
            "mnemonics": sorted({e.record.mnemonic for e in events if e.record.mnemonic}),
            "immediate_actions": list(actions),
            # NVIDIA's action for the incident: its decisive code's (`models.decisive_action`)
            "immediate_action": decisive.action if decisive else None,
            "decisive_code": str(decisive.code) if decisive else None,
            "processes": list(processes),
            "pods": _listed(_pod(e.attribution) for e in events),
            "workloads": _listed(e.workload for e in events if not e.affected),
            "affected": _listed(_affected(e) for e in events if e.affected),
            "recovery_action": self.state.recovery_action,
            "first_seen": events[0].when,
            "last_seen": events[-1].when,
            "first_line": first.line,
            "last_line": last.line_end,
            "catalog_version": first.catalog_version,
        }


class IncidentTable:
    """The incidents of one scan (`models.grouping.IncidentLookup` for its `Grouper`)."""

    def __init__(self, policy: PipelinePolicy, assignments: Iterable[Assignment] = ()) -> None:
        self.policy = policy
        self.assignments = list(assignments)
        self.by_id: dict[str, ScanIncident] = {}  # every incident, in the order they opened
        self.by_fp: dict[str, ScanIncident] = {}  # per fingerprint: its latest incident
        self.events: list[ScanEvent] = []
        self._counted: dict[str, list[ScanEvent]] = defaultdict(list)  # per node: reports that counted

    # -- the engine's look-ups ---------------------------------------------------------------------

    def latest(self, fingerprint: str) -> IncidentState | None:
        inc = self.by_fp.get(fingerprint)
        return inc.state if inc is not None else None

    def gpu_occurrences(self, node: str, at: datetime, window_s: float) -> list[Occurrence]:
        out: list[Occurrence] = []
        for e in self._counted.get(node, ()):
            st = self.by_id[e.incident_id].state
            if not e.counted or st.component != "gpu" or st.status != "open" or \
                    abs((e.occurred_at - at).total_seconds()) > window_s:
                continue
            latest = e.occurred_at == st.occurrence_at
            out.append(Occurrence(st, e.occurred_at, tuple(st.occurrence_signals) if latest
                                  else (signal(e.family, e.sources, e.code),)))
        return out

    # -- what it decided ---------------------------------------------------------------------------

    def apply(self, placed: Placement, change: IncidentChange, event: ScanEvent) -> ScanIncident:
        """Write the engine's decision about `event` (`models.grouping.Grouper.group`)."""
        comp, attr = placed.component, event.attribution
        if comp.kind == "gpu" and event.gpu == "node":
            event.gpu = comp.id  # a node-level report of a GPU fault
        current = self.by_id[placed.current.incident_id] if placed.current is not None else None
        if change.resolved_previous is not None and current is not None:
            current.state = change.resolved_previous
        if change.kind in ("opened", "reopened"):
            obs = event.observation
            nvswitch = comp.kind == "nvswitch"
            inc = ScanIncident(replace(change.incident, gpu_uuid=None if nvswitch else attr.gpu.uuid),
                               pci=comp.id if nvswitch else attr.gpu.pci or normalize_pci(obs.pci),
                               serial=None if nvswitch else attr.gpu.serial, category=obs.category or "unknown",
                               reason=change.reason)
            self.by_id[inc.state.incident_id] = inc
        else:
            assert current is not None
            inc = current
            inc.state = change.incident
        if inc.component != "nvswitch":  # what the incident did not know yet and this report tells
            inc.state = replace(inc.state, gpu_uuid=inc.state.gpu_uuid or attr.gpu.uuid)
            inc.serial = inc.serial or attr.gpu.serial
        self.by_fp[comp.fingerprint] = self.by_fp[inc.fingerprint] = inc
        event.incident_id, event.counted, event.order = inc.state.incident_id, change.counted, len(self.events)
        event.affected = placed.sympathetic is not None
        inc.events.append(event)
        inc.observations.append(event.observation)
        self.events.append(event)
        if change.counted:
            self._counted[event.node].append(event)
        if comp.kind == "workload" and event.gpu != "node":
            self._keep_with_gpu(event.node, event.gpu, event.occurred_at)
        return inc

    def finish(self) -> None:
        """After the last report: every incident is classified, and those its nodes' later faults show
        quiet for the quiet period are resolved, as the stream resolves them (`streams.event_clock`)."""
        self._resolve_quiet()
        for inc in self.incidents():
            verdict = incident_verdict(inc.state, pci=inc.pci,
                                       workloads=_listed(e.workload for e in inc.events if not e.affected),
                                       observations=inc.observations, app=self._context(inc), policy=self.policy)
            inc.category, inc.reason, inc.rule = verdict.category, verdict.reason, verdict.rule

    def incidents(self) -> list[ScanIncident]:
        """The incidents in the order they opened, but those merged into another."""
        return [i for i in self.by_id.values() if i.merged_into is None]

    def _resolve_quiet(self) -> None:
        clocks: dict[str, datetime] = {}
        for e in self.events:  # the nodes' clocks: their latest kernel-log faults (`streams.event_clock`)
            if e.observation.source == "kernel":
                clocks[e.node] = max(clocks.get(e.node, e.occurred_at), e.occurred_at)
        quiet = timedelta(seconds=self.policy.quiet_period_s)
        for inc in self.incidents():
            st = inc.state
            if st.status != "open" or st.component == "fleet":
                continue
            nodes = {e.node for e in inc.events} if st.component == "workload" else {st.node}
            if nodes and all(n in clocks and st.last_seen + quiet < clocks[n] for n in nodes):
                inc.state = replace(st, status="resolved", resolved_at=st.last_seen + quiet)

    # -- application faults that stay with their GPU -----------------------------------------------

    def keeps_at_once(self, event: ScanEvent) -> bool:
        """Whether the GPU keeps this application fault of a workload, not grouped yet, at its own time,
        with no other fault to move with it: it goes to the GPU's incident at once, as the stream puts
        it (`streams.app_windows.AppWindows.keeps_only`)."""
        if event.family != "application" or event.report.workload is None or event.gpu == "node":
            return False
        workloads, moving = self._keeping(event.node, event.gpu, event.occurred_at, extra=event)
        return event.workload in workloads and moving == [event]

    def _keeping(self, node: str, gpu: str, at: datetime,
                 extra: ScanEvent | None = None) -> tuple[list[str], list[ScanEvent]]:
        """The workloads the GPU keeps at `at` (`models.grouping.kept_workloads`), and their faults within
        the window not in a GPU incident yet; `extra`: a fault not grouped yet, counted."""
        since = window_start(at, self.policy)
        recent = [e for e in self.events if e.family == "application" and since <= e.occurred_at <= at]
        if extra is not None:
            recent.append(extra)
        here = [e for e in recent if (e.node, e.gpu) == (node, gpu)]
        elsewhere: dict[str, list[datetime]] = defaultdict(list)
        for e in recent:
            if e.workload and (e.node, e.gpu) != (node, gpu):
                elsewhere[e.workload].append(e.occurred_at)
        workloads = kept_workloads([AppFault(e.node, e.gpu, e.workload, e.occurred_at, e.counted) for e in here],
                                   elsewhere, at, self.policy)
        return workloads, [e for e in here if e.workload in workloads
                           and (e is extra or self.by_id[e.incident_id].component != "gpu")]

    def _keep_with_gpu(self, node: str, gpu: str, at: datetime) -> None:
        """After an application fault of a workload on (node, GPU) at `at`: the faults within the window
        ending there of the workloads the GPU keeps (`models.grouping.kept_workloads`) move to its incident."""
        _, found = self._keeping(node, gpu, at)
        comp = Component(ComponentKind.GPU, node, gpu)
        moving = _in_time_order(found)
        if not moving:
            return
        row = self.by_fp.get(comp.fingerprint)
        if row is not None and (row.state.status != "open" or (at - row.state.last_seen).total_seconds()
                                > self.policy.quiet_period_s):
            if row.state.status == "open":  # quiet for longer than the quiet period before these faults
                row.state = replace(row.state, status="resolved", resolved_at=row.state.last_seen + timedelta(
                    seconds=self.policy.quiet_period_s))
            row = None
        if row is None:
            row = self._open(comp, moving)
        left = {e.incident_id for e in moving}
        for e in moving:
            self.by_id[e.incident_id].events.remove(e)
            row.events.append(e)
            e.incident_id = row.state.incident_id
        self._moved(row, moving, left, f"its faults on {gpu} stay with the GPU (different workloads fault "
                                       f"there): merged into incident {row.state.incident_id}")
        self.by_fp[comp.fingerprint] = row

    def _open(self, comp: Component, events: list[ScanEvent]) -> ScanIncident:
        first = events[0]
        state = IncidentState(
            incident_id=new_incident_id(comp.fingerprint, first.occurred_at), fingerprint=comp.fingerprint,
            node=comp.node or first.node, gpu=component_gpu(comp), family="application", status="open", count=0,
            first_seen=first.occurred_at, last_seen=first.occurred_at, category="application",
            component=comp.kind, component_id=comp.id)
        inc = self.by_id[state.incident_id] = ScanIncident(state, category="application")
        return inc

    def _moved(self, row: ScanIncident, events: list[ScanEvent], left: set[str], reason: str) -> None:
        for e in events:
            g = e.attribution.gpu
            row.state = replace(row.state, gpu_uuid=row.state.gpu_uuid or g.uuid)
            row.serial, row.pci = row.serial or g.serial, row.pci or g.pci or normalize_pci(e.observation.pci)
        self._recount(row)
        for incident_id in sorted(left - {row.state.incident_id}):
            other = self.by_id[incident_id]
            if self._recount(other):
                continue  # it keeps faults of its own
            if other.state.status == "open":
                other.state = replace(other.state, status="resolved", resolved_at=other.state.last_seen)
            other.merged_into, other.reason = row.state.incident_id, reason

    def _recount(self, inc: ScanIncident) -> int:
        """Its count, times and codes from its reports, in time order (after reports moved)."""
        events = inc.events = _in_time_order(inc.events)
        counts = recount_events(events, self.policy)
        st = replace(inc.state, codes=tuple(_listed(e.code for e in events)), count=counts.count)
        if counts.occurrence is not None:
            st = replace(st, occurrence_at=counts.occurrence[0], occurrence_signals=counts.occurrence[1])
            for e, counted in zip(events, counts.counted, strict=True):
                e.counted = counted
        if events:
            st = replace(st, first_seen=events[0].occurred_at, last_seen=max(e.occurred_at for e in events))
        inc.state = st
        return st.count

    # -- what classification reads -----------------------------------------------------------------

    def _context(self, inc: ScanIncident) -> AppContext | None:
        st = inc.state
        if st.component == "workload":
            gpus = {(e.node, e.gpu) for e in inc.events}
            nodes = {e.node for e in inc.events}
            workload = st.component_id or ""
            return AppContext(count=len(nodes) or 1, workloads=[workload], fault_gpus={workload: len(gpus) or 1},
                              clean_gpus={})
        if st.component == "gpu" and st.family == "application":
            pair = (st.node, st.gpu)
            return self.gpu_contexts({pair}, st.last_seen)[pair]
        return None

    def gpu_contexts(self, pairs: set[tuple[str, str]], until: datetime) -> dict[tuple[str, str], AppContext]:
        """For each (node, GPU): the workloads whose application faults it saw within the classification
        window ending at `until`, on how many GPUs each faulted, and on how many others it ran clean."""
        since = window_start(until, self.policy)
        recent = [e for e in self.events if e.family == "application" and since <= e.occurred_at <= until
                  and not e.affected]
        here: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        for e in recent:
            if (e.node, e.gpu) in pairs and e.counted:
                counts = here[(e.node, e.gpu)]
                counts[e.workload or ""] = counts.get(e.workload or "", 0) + 1
        workloads = {w for counts in here.values() for w in counts if w}
        fault_gpus: dict[str, set[tuple[str, str]]] = defaultdict(set)
        ran: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for e in recent:
            if e.workload in workloads:
                fault_gpus[e.workload].add((e.node, e.attribution.gpu.uuid or e.gpu))
        for a in self.assignments:
            if a.workload in workloads and since <= a.at <= until:
                ran[a.workload].add((a.node, a.gpu))
        out: dict[tuple[str, str], AppContext] = {}
        for pair in pairs:
            counts = here.get(pair, {})
            ws = sorted(w for w in counts if w)
            out[pair] = AppContext(count=sum(counts.values()), workloads=ws,
                                   fault_gpus={w: len(fault_gpus[w]) for w in ws},
                                   clean_gpus={w: len(ran[w] - fault_gpus[w]) for w in ws})
        return out


def _in_time_order(events: Iterable[ScanEvent]) -> list[ScanEvent]:
    return sorted(events, key=lambda e: (e.occurred_at, e.order))


def _listed(values: Iterable[str | None]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))[:MAX_LISTED]


def _affected(e: ScanEvent) -> str | None:
    """A killed workload as the incident lists it: its pod, else its process (as the stream lists them)."""
    r = e.attribution.process
    return _pod(e.attribution) or (f"{r.process or '?'}[{r.pid}]" if r.pid is not None else None) or e.workload


def _pod(attr: Attribution) -> str | None:
    p = attr.pod
    return f"{p.namespace}/{p.pod}/{p.container}" if p.pod else None
