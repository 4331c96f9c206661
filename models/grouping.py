"""The grouping engine: which incident a fault report joins, how it is counted, how the incident is
classified.

Pure decisions, the same for every caller: `xidpipe scan` runs them on a table of incidents in
memory (`models.scan`), the stream worker on the incident rows of its transaction, locked first
(`streams.grouping`), and `xidpipe replay` through the stream's store in one process. Each caller
reads the incidents the engine asks for through an `IncidentLookup` and writes back what it decides.

- `Report`: what grouping needs of one fault report after attribution (`report_of`);
  `in_grouping_order`: reports read together are grouped in event time, moment by moment (a
  node's reports within `occurrence_window_s` of the first), and within a moment those naming a
  GPU first, so that a node-level report of the same fault ("GPU lost", a crash dump) finds the
  GPU's incident. A node's reports keep the order they were read in.
- `Grouper.group`: the incident a report joins and what it does to it. `Grouper.place` finds the
  incident: the report's component (`models.identity.component_of`); for a node-level report, the
  open GPU incident of its node with an occurrence, in event time, that it came with (not the
  incident's latest: one batch may hold hours of a node); for a GPU known by UUID, the incident
  opened under its PCI address before the UUID was known. `apply_fault` counts it: another view of
  that occurrence, a new occurrence, or, after the quiet period or once the incident is resolved, a
  new incident linked to the old one.
- `same_fault`: a kernel-log Xid and an NVML Xid event of one GPU that are one fault.
- `kept_workloads` and `recount_events`: application faults that stay with their GPU across
  workloads belong to the GPU's incident, decided at each application fault over the window that
  ends at it, and an incident whose reports moved is counted again.
- `incident_verdict` (with `classify_in_context`, `AppContext`): an incident's category and reason,
  from the catalog and what its workloads did elsewhere.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from models.classify import ClassifyPolicy, Evidence, FaultGroup, Verdict, classify, classify_workload
from models.correlate import Attribution
from models.decisive_action import application_workflow, decisive_evidence, with_workflow
from models.identity import (
    Component,
    attaches_to_gpu_fault,
    companion_group,
    component_of,
    joins_occurrence,
    occurrence_group,
    primary_family,
    signal,
    stays_with_gpu,
)
from models.incidents import FaultObservation, IncidentChange, IncidentState, component_gpu, new_incident_id
from models.pci import normalize_pci
from models.stream_policy import PipelinePolicy
from models.sympathetic import sympathetic_to
from models.vocabulary import ComponentKind, Family

# --- reports ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Report:
    """One fault report as grouping sees it, after attribution."""

    node: str
    source: str  # kernel, nvml
    kind: str
    family: str
    code: str
    at: datetime  # the fault's event time
    pci: str | None  # the PCI address of its GPU (or NVSwitch), normalised
    gpu_uuid: str | None
    workload: str | None  # its workload, when its pod is known: an application fault of a known pod is the job's
    error: object = None  # a driver error's class (`details["error"]`)
    names_gpu: bool = True  # it or its attribution names a GPU (a UUID or a PCI address)
    xid: int | None = None
    pid: int | None = None  # the process the line names
    recovery_action: str | None = None  # an Xid 154's decoded recovery action (`details["recovery_action"]`)

    @property
    def component(self) -> Component:
        """The component the report is about, before context moves it (`Grouper.place`)."""
        return component_of(node=self.node, kind=self.kind, family=self.family, pci=self.pci, gpu_uuid=self.gpu_uuid,
                            workload=self.workload)


def report_of(obs: FaultObservation, attr: Attribution) -> Report:
    """The report of an observation attributed with the node state valid at its time."""
    return Report(
        obs.node, obs.source, obs.kind, obs.family, obs.code, obs.occurred_at, attr.gpu.pci or normalize_pci(obs.pci),
        attr.gpu.uuid, attr.workload if attr.pod.pod else None, obs.details.get("error"),
        names_gpu=attr.gpu.uuid is not None or attr.gpu.pci is not None or obs.pci is not None,
        xid=obs.xid, pid=obs.pid, recovery_action=_str_or_none(obs.details.get("recovery_action")),
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


_T = TypeVar("_T")


def in_grouping_order(items: Sequence[_T], report: Callable[[_T], Report], window_s: float) -> list[_T]:
    """Reports read together (a batch, a log), in the order they are grouped, the same whichever way
    they were cut into batches: each node's reports in the order read, cut into moments (consecutive
    reports within `window_s` of the moment's first), the moments of all nodes merged by the time of
    their first report, and within a moment the reports that name a GPU first. A node-level report
    of the same fault then finds the GPU's incident (its companion, `Grouper.place`)."""
    by_node: dict[str, list[list[_T]]] = {}
    for item in items:
        r = report(item)
        moments = by_node.setdefault(r.node, [])
        if moments and abs((r.at - report(moments[-1][0]).at).total_seconds()) <= window_s:
            moments[-1].append(item)
        else:
            moments.append([item])
    merged = heapq.merge(*by_node.values(), key=lambda moment: report(moment[0]).at)
    return [item for moment in merged for item in sorted(moment, key=lambda i: not report(i).names_gpu)]


def same_fault(
    a_source: str, a_gpu: str | None, a_xid: int | None, a_at: datetime,
    b_source: str, b_gpu: str | None, b_xid: int | None, b_at: datetime,
    window_s: float,
) -> bool:
    """A kernel-log Xid and an NVML Xid event for the same GPU and Xid within the window are one fault."""
    if a_source == b_source or a_gpu is None or a_gpu != b_gpu or a_xid is None or a_xid != b_xid:
        return False
    return abs((a_at - b_at).total_seconds()) <= window_s


# --- which incident a report joins ----------------------------------------------------------------


class IncidentLookup(Protocol):
    """The incidents the engine reads, as grouped so far (the caller's table: SQL rows, a dict)."""

    def latest(self, fingerprint: str) -> IncidentState | None:
        """The latest incident of a fingerprint, open or resolved; None when it has none."""
        ...

    def gpu_occurrences(self, node: str, at: datetime, window_s: float) -> Sequence[Occurrence]:
        """The occurrences (their first, counted reports) of the node's open GPU incidents within
        `window_s` of `at`, in event time: those a node-level report at `at` may belong to."""
        ...


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence of an incident: when it was counted and its signals (`models.identity.signal`)."""

    incident: IncidentState
    at: datetime
    signals: tuple[str, ...]

    @property
    def group(self) -> str | None:
        return occurrence_group(self.signals)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a report goes: its component, the companion group of the GPU fault a node-level report
    attaches to (None: its own), the component's latest incident (None: it has none yet), the
    occurrence of it a node-level report came with (None: the latest, as for any report), and
    `sympathetic`: why an application-class report is a sympathetic report of the GPU's hardware fault
    (`models.sympathetic`), whose incident it joins: its workload was affected, not at fault."""

    component: Component
    group: str | None
    current: IncidentState | None
    occurrence: Occurrence | None = None
    sympathetic: str | None = None


def reads(r: Report) -> set[str]:
    """The fingerprints `Grouper.place` may ask its lookup for about `r`, besides a node-level
    report's candidates: its component's, and for a GPU's or a workload's fault the GPU's, by UUID
    and by PCI address (a caller can read them all at once)."""
    comp = r.component
    out = {comp.fingerprint}
    gpu = comp.id if comp.kind == "gpu" else (r.gpu_uuid or r.pci) if comp.kind == "workload" else None
    if gpu:
        out.add(Component(ComponentKind.GPU, r.node, gpu).fingerprint)
    if gpu and r.pci and r.pci != gpu:
        out.add(Component(ComponentKind.GPU, r.node, r.pci).fingerprint)
    return out


class Grouper:
    """The engine for one run of reads (a transaction, a scan): the incidents come from `lookup`,
    which must reflect every change the caller applied; what a GPU was found to be (suspected
    hardware) is remembered for the run."""

    def __init__(self, lookup: IncidentLookup, policy: PipelinePolicy) -> None:
        self.lookup = lookup
        self.policy = policy

    def group(self, r: Report) -> tuple[Placement, IncidentChange]:
        """Where the report goes and what it does to that incident (the caller applies the change)."""
        placed = self.place(r)
        occ = placed.occurrence
        group = placed.group
        current = placed.current
        if (group is None and r.family == Family.RECOVERY_ACTION and current is not None and current.status == "open"
                and current.occurrence_signals):
            group = occurrence_group(current.occurrence_signals)  # Xid 154 joins the fault it reports on
        change = apply_fault(current, component=placed.component, node=r.node, family=r.family, code=r.code,
                             signal=signal(r.family, r.source, r.code, group), at=r.at, policy=self.policy,
                             occurrence=(occ.at, occ.signals) if occ is not None else None,
                             pid=r.pid, sympathetic=placed.sympathetic)
        if r.recovery_action:
            change = replace(change, incident=replace(change.incident, recovery_action=r.recovery_action))
        return placed, change

    def place(self, r: Report) -> Placement:
        if r.family == Family.APPLICATION and (r.gpu_uuid or r.pci):
            found = self._sympathetic(r)
            if found is not None:
                return found
        comp = r.component
        if comp.kind == "node":
            how = attaches_to_gpu_fault(r.family, r.error)
            occ = self._companion(r, any_group=how == "any") if how is not None else None
            if occ is not None:
                st = occ.incident
                gpu = Component(ComponentKind.GPU, st.node, st.component_id or st.gpu)
                return Placement(gpu, occ.group if how == "any" else None, st, occ)
        return Placement(comp, None, self.latest(comp, r.pci))

    def _sympathetic(self, r: Report) -> Placement | None:
        """The GPU's hardware incident when the application-class report follows its fault (`models.sympathetic`)."""
        gpu = r.gpu_uuid or r.pci
        assert gpu is not None
        st = self.latest(Component(ComponentKind.GPU, r.node, gpu), r.pci)
        if st is None:
            return None
        why = sympathetic_to(r.xid, r.pid, r.at, st, window_s=self.policy.sympathetic_window_s,
                             skew_s=self.policy.clock_skew_s)
        if why is None:
            return None
        comp = Component(ComponentKind.GPU, st.node, st.component_id or st.gpu)
        return Placement(comp, occurrence_group(st.occurrence_signals), st, sympathetic=why)

    def latest(self, comp: Component, pci: str | None) -> IncidentState | None:
        """The component's latest incident; for a GPU known by UUID without one, the incident opened
        under its PCI address before the UUID was known (unless another card's): its reports join
        it, its recurrence links to it."""
        found = self.lookup.latest(comp.fingerprint)
        if found is None and comp.kind == "gpu" and pci and pci != comp.id:
            by_pci = self.lookup.latest(Component(ComponentKind.GPU, comp.node, pci).fingerprint)
            if by_pci is not None and by_pci.gpu_uuid in (None, comp.id):
                return by_pci
        return found

    def _companion(self, r: Report, any_group: bool) -> Occurrence | None:
        """The occurrence of an open GPU incident of the node that this node-level report came with: the
        closest in event time within the occurrence window, of the report's own companion group or
        (`any_group`: a crash dump) of any group."""
        group = companion_group(r.family)
        best: tuple[float, Occurrence] | None = None
        for occ in self.lookup.gpu_occurrences(r.node, r.at, self.policy.occurrence_window_s):
            st = occ.incident
            if st.status != "open" or st.component != "gpu" or not (any_group or occ.group == group):
                continue
            gap = abs((r.at - occ.at).total_seconds())
            if gap <= self.policy.occurrence_window_s and (best is None or gap < best[0]):
                best = (gap, occ)
        return best[1] if best is not None else None


# --- how it is counted --------------------------------------------------------------------------


def apply_fault(
    current: IncidentState | None,
    *,
    component: Component,
    node: str,
    family: str,
    code: str,
    signal: str,
    at: datetime,
    policy: PipelinePolicy,
    occurrence: tuple[datetime, tuple[str, ...]] | None = None,
    pid: int | None = None,
    sympathetic: str | None = None,
) -> IncidentChange:
    """Group one fault report into its component's incident.

    Another view of the occurrence it came with (`occurrence`, in event time; by default the one
    counted last: `models.identity.joins_occurrence`), and a sympathetic report of it (`sympathetic`:
    why, `models.sympathetic`), joins it without counting; any other report counts a new occurrence
    of the open incident; after the quiet period, or when the latest incident is resolved, a new
    incident linked to the previous one opens. `pid`: the process the report names (an occurrence
    remembers its processes).
    """
    # A recurrence keeps the fingerprint of the incident it follows (a GPU first known by its PCI address).
    fingerprint = current.fingerprint if current is not None else component.fingerprint
    if current is not None and current.status == "open":
        quiet = (at - current.last_seen).total_seconds()
        if quiet <= policy.quiet_period_s:
            codes = current.codes if code in current.codes else (*current.codes, code)
            seen = replace(current, last_seen=max(current.last_seen, at), first_seen=min(current.first_seen, at),
                           codes=codes, family=primary_family(current.family, family))
            latest = (current.occurrence_at, current.occurrence_signals)
            occ_at, occ_signals = occurrence if occurrence is not None else latest
            if sympathetic is not None or joins_occurrence(occ_at, occ_signals, at, signal,
                                                           policy.occurrence_window_s, policy.duplicate_window_s):
                if occ_at == current.occurrence_at:  # the latest occurrence records its signals and processes
                    signals, pids = current.occurrence_signals, current.occurrence_pids
                    seen = replace(seen, occurrence_signals=signals if signal in signals else (*signals, signal),
                                   occurrence_pids=pids if pid is None or pid in pids else (*pids, pid))
                what = f"a sympathetic report ({sympathetic})" if sympathetic else "another report"
                return IncidentChange("updated", seen, f"{code} is {what} of the fault counted at "
                                      f"{_hms(occ_at)} in incident {current.incident_id}", counted=False)
            updated = replace(seen, count=current.count + 1, occurrence_at=at, occurrence_signals=(signal,),
                              occurrence_pids=(pid,) if pid is not None else ())
            if current.occurrence_at is not None and at < current.occurrence_at:  # read late: not the latest
                updated = replace(updated, occurrence_at=current.occurrence_at,
                                  occurrence_signals=current.occurrence_signals,
                                  occurrence_pids=current.occurrence_pids)
            return IncidentChange("updated", updated, f"{code} repeats incident {current.incident_id}")
        resolved = replace(current, status="resolved", resolved_at=current.last_seen + timedelta(
            seconds=policy.quiet_period_s))
        return IncidentChange(
            "reopened", _fresh(fingerprint, component, node, family, code, signal, at, current.incident_id, pid),
            f"{code} after {quiet:.0f} s of quiet (more than {policy.quiet_period_s:.0f} s): "
            f"incident {current.incident_id} resolved, recurrence opened",
            resolved_previous=resolved,
        )
    if current is not None:  # the latest incident of this fingerprint is resolved: a recurrence
        return IncidentChange(
            "reopened", _fresh(fingerprint, component, node, family, code, signal, at, current.incident_id, pid),
            f"{code} recurs after incident {current.incident_id} was resolved",
        )
    return IncidentChange("opened", _fresh(fingerprint, component, node, family, code, signal, at, None, pid),
                          f"first {code} on {component.kind} {component.id}")


def _hms(at: datetime | None) -> str:
    return at.strftime("%H:%M:%S") if at is not None else "?"


def _fresh(fp: str, component: Component, node: str, family: str, code: str, signal: str, at: datetime,
           previous: str | None, pid: int | None = None) -> IncidentState:
    return IncidentState(
        incident_id=new_incident_id(fp, at), fingerprint=fp, node=node, gpu=component_gpu(component), family=family,
        status="open", count=1, first_seen=at, last_seen=at, codes=(code,), previous_incident_id=previous,
        component=component.kind, component_id=component.id, occurrence_at=at, occurrence_signals=(signal,),
        occurrence_pids=(pid,) if pid is not None else (),
    )


class GroupedEvent(Protocol):
    """A fault report as stored in its incident (a fault_events row, a scan's event)."""

    @property
    def occurred_at(self) -> datetime: ...
    @property
    def code(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def sources(self) -> str | None: ...  # kernel, nvml, kernel+nvml
    @property
    def counted(self) -> bool | None: ...  # the report counted an occurrence when it was grouped


@dataclass(frozen=True, slots=True)
class Recount:
    """An incident's occurrences from its fault events: per event (in the order given) whether it
    counts, and the occurrence counted last when they were counted again (None: kept as grouped)."""

    counted: tuple[bool, ...]
    occurrence: tuple[datetime | None, tuple[str, ...]] | None

    @property
    def count(self) -> int:
        return sum(self.counted)


def recount_events(events: Sequence[GroupedEvent], policy: PipelinePolicy) -> Recount:
    """The occurrences of an incident whose fault events (in time order) moved in or out.

    An incident of application faults only counts its occurrences again, in time order, as grouping
    its events in that order does (`models.identity.joins_occurrence`): the reports of one crash on
    several GPUs of a workload are one occurrence there, two in two GPU incidents. Any other keeps
    the marks its reports got when they were grouped."""
    if not all(e.family == "application" for e in events):
        return Recount(tuple(e.counted is not False for e in events), None)
    counted: list[bool] = []
    at: datetime | None = None
    signals: tuple[str, ...] = ()
    for e in events:
        source = "kernel" if "kernel" in (e.sources or "kernel") else str(e.sources)
        sig = signal(e.family, source, e.code)
        if joins_occurrence(at, signals, e.occurred_at, sig, policy.occurrence_window_s, policy.duplicate_window_s):
            signals = signals if sig in signals else (*signals, sig)
            counted.append(False)
        else:
            at, signals = e.occurred_at, (sig,)
            counted.append(True)
    return Recount(tuple(counted), (at, signals))


# --- how it is classified -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AppContext:
    """What the workloads of application faults did, within `classify_window_s`: for a GPU, the
    occurrences there (`count`), the workloads that faulted there, on how many GPUs each faulted
    (`fault_gpus`) and on how many others it ran clean (`clean_gpus`); for a workload's incident,
    the nodes it faulted on (`count`) and its GPUs (`fault_gpus[workload]`)."""

    count: int
    workloads: list[str]
    fault_gpus: dict[str, int]
    clean_gpus: dict[str, int]


@dataclass(frozen=True, slots=True)
class AppFault:
    """An application-class fault as the keep rule reads it: where, whose, when, and whether it
    counted an occurrence."""

    node: str
    gpu: str  # as fault events record it (`models.identity.gpu_key`)
    workload: str | None
    at: datetime
    counted: bool = True


def kept_workloads(here: Sequence[AppFault], elsewhere: Mapping[str, Sequence[datetime]], at: datetime,
                   policy: PipelinePolicy) -> list[str]:
    """The workloads whose application faults on one GPU within the classification window that ends
    at `at` are the GPU's (`models.identity.stays_with_gpu`): those that faulted there and on no other
    GPU within the window, when the GPU repeats faults across enough of them. `here`: the GPU's
    application faults; `elsewhere`: per workload, when it faulted on other GPUs.

    Only the window's faults decide, never what was read after them, so the answer does not depend
    on how the faults were cut into batches: the stream and `xidpipe scan` ask it at every
    application fault of a known workload, and move the faults of the workloads it names (within
    the window) to the GPU's incident."""
    lo = window_start(at, policy)
    inside = [f for f in here if lo <= f.at <= at]
    only_here = sorted({f.workload for f in inside if f.workload
                        and not any(lo <= t <= at for t in elsewhere.get(f.workload, ()))})
    count = sum(1 for f in inside if f.counted)
    if stays_with_gpu(len(only_here), count, repeat_threshold=policy.repeat_threshold,
                      min_distinct_workloads=policy.min_distinct_workloads):
        return only_here
    return []


def window_start(until: datetime, policy: PipelinePolicy) -> datetime:
    """Where the classification window ending at `until` starts."""
    return until - timedelta(seconds=policy.classify_window_s)


@dataclass(frozen=True, slots=True)
class ClassifyContext:
    """What is known about the workloads of one incident's GPU, within the policy's window.

    workload_fault_gpus: for each workload that faulted here, on how many GPUs (this one included)
        it faulted with an application-class fault.
    workload_clean_gpus: for each such workload, on how many other GPUs it ran without faulting.
    """

    gpu: str
    family: str
    codes: Sequence[str]
    categories: Sequence[str]
    count: int
    workloads: Sequence[str]
    workload_fault_gpus: Mapping[str, int]
    workload_clean_gpus: Mapping[str, int] = field(default_factory=dict)
    severity: str | None = None
    recovery_action: str | None = None
    evidence: Evidence | None = None


def classify_in_context(ctx: ClassifyContext, policy: PipelinePolicy) -> Verdict:
    """Catalog category, turned by context: an application Xid that stays with the GPU across
    different workloads (which run clean on other GPUs) is suspected hardware; one that follows a
    workload across GPUs stays an application fault."""
    verdict = classify(
        FaultGroup(
            family=ctx.family, categories=list(ctx.categories), codes=list(ctx.codes), count=ctx.count,
            workloads=list(ctx.workloads), gpu=ctx.gpu, workload_gpu_spread=dict(ctx.workload_fault_gpus),
            severity=ctx.severity, recovery_action=ctx.recovery_action, evidence=ctx.evidence,
        ),
        ClassifyPolicy(repeat_threshold=policy.repeat_threshold, min_distinct_workloads=policy.min_distinct_workloads),
    )
    if verdict.category == "suspected_hardware":
        clean = {w: n for w, n in ctx.workload_clean_gpus.items() if n > 0 and w in ctx.workloads}
        if clean:
            ran = ", ".join(f"{w} on {n}" for w, n in sorted(clean.items()))
            return Verdict(verdict.category, f"{verdict.reason}; the same workloads ran clean on other GPUs ({ran})",
                           verdict.rule)
    return verdict


def incident_verdict(inc: IncidentState, *, pci: str | None, workloads: Sequence[str],
                     observations: Sequence[FaultObservation], app: AppContext | None,
                     policy: PipelinePolicy) -> Verdict:
    """The category of an incident and why: `observations` are the reports grouped into it in this run,
    `workloads` those listed on it, `app` what its workloads did (`AppContext`: for a GPU's
    application faults and for a workload's incident)."""
    cats = [o.category for o in observations if o.category]
    severity = next((str(o.details["severity"]) for o in reversed(observations) if "severity" in o.details), None)
    recovery = next((str(o.details["recovery_action_new"]) for o in reversed(observations)
                     if "recovery_action_new" in o.details), None)
    gpu_label = inc.gpu_uuid or (f"GPU {pci}" if pci else "the node")
    below = next((o.details for o in reversed(observations) if o.details.get("gpus_below")), None)
    if below is not None and inc.component == "node":  # a root port's AER report above several GPUs
        gpu_label = f"the GPUs below port {below.get('port')} ({', '.join(map(str, below['gpus_below']))})"
    if inc.component == "nvswitch":
        gpu_label = f"NVSwitch {inc.component_id}"
    if inc.component == "workload":
        gpus, nodes = app.fault_gpus.get(inc.component_id or "", 1) if app else 1, app.count if app else 1
        verdict = classify_workload(", ".join(inc.codes), inc.component_id or "?", gpus, nodes, inc.count)
        return with_workflow(verdict, application_workflow(inc, observations, gpus - 1))
    if inc.family != "application" or app is None:
        return classify_in_context(ClassifyContext(
            gpu=gpu_label, family=inc.family, codes=inc.codes, categories=cats, count=inc.count,
            workloads=list(workloads), workload_fault_gpus={}, severity=severity, recovery_action=recovery,
            evidence=decisive_evidence(inc, workloads, observations) if inc.family != "application" else None,
        ), policy)
    verdict = classify_in_context(ClassifyContext(
        gpu=gpu_label, family=inc.family, codes=inc.codes, categories=cats, count=max(app.count, inc.count),
        workloads=app.workloads, workload_fault_gpus=app.fault_gpus, workload_clean_gpus=app.clean_gpus,
    ), policy)
    other_gpus = max((n - 1 for n in app.fault_gpus.values()), default=0)
    return with_workflow(verdict, application_workflow(inc, observations, other_gpus))
