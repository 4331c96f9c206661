"""Fault events and incidents: what the stream decides for each fault, as pure functions.

- `observation_from_kernel` turns a parsed kernel fault into one `FaultObservation` (with the
  catalog's recommendation); a health signal's records map to observations in their own folder
  (`models.signals`, e.g. `models.signals.nvml.mapping`).
- `same_fault` says whether a kernel-log Xid and an NVML Xid event are one fault.
- `apply_fault` groups a fault into the open incident of its (node, GPU, family) fingerprint, opens
  one, or reopens after a quiet period (a new incident linked to the resolved one).
- `resolve_if_quiet` resolves an incident nobody has seen a fault for in the quiet period.
- `classify_in_context` decides application vs suspected hardware from the workloads involved.
- `actions_for` derives the action requests (cordon candidate, ticket, notification) of a change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from models.classify import ClassifyPolicy, FaultGroup, Verdict, classify
from models.event_time import record_time
from models.families import family_of
from models.identity import Component, joins_occurrence, primary_family
from models.kernlog.clock import parse_stamp
from models.kernlog.record import FaultRecord
from models.node_records import KernelLine
from models.stream_policy import PipelinePolicy
from models.vocabulary import Category, ComponentKind, report_code

FaultSource = Literal["kernel", "nvml", "kube"]  # kube: the cluster's view of a node (the responder's watch)


@dataclass(frozen=True, slots=True)
class FaultObservation:
    """One fault as a node reported it, before attribution."""

    node: str
    source: FaultSource
    record_id: str
    occurred_at: datetime
    kind: str
    family: str
    message: str
    raw: str
    xid: int | None = None
    sxid: int | None = None
    pci: str | None = None
    gpu_uuid: str | None = None
    gpu_instance_id: int | None = None
    pid: int | None = None
    process: str | None = None
    mnemonic: str | None = None
    category: str | None = None
    immediate_action: str | None = None
    investigatory_action: str | None = None
    description: str | None = None
    catalog_version: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def code(self) -> str:
        return report_code(self.kind, self.xid, self.sxid)

    @property
    def content_hash(self) -> str:
        """Hash over what identifies this observation: a redelivered or re-published copy has the same."""
        payload = "\x1f".join((self.node, self.source, self.record_id, self.kind, self.raw)).encode()
        return hashlib.sha256(payload).hexdigest()[:32]


def observation_from_kernel(rec: FaultRecord, line: KernelLine, index: int = 0) -> FaultObservation:
    """A parsed kernel fault, at its event time (`models.event_time.record_time`: the record's own
    stamp, else its uptime plus the boot time, else the line's event time; the read time only when
    the kernel's clock is unknown).

    `index` distinguishes several records parsed from one published line.
    """
    at = record_time(rec, line).at
    record_id = line.record_id if index == 0 else f"{line.record_id}#{index}"
    return FaultObservation(
        node=line.node, source="kernel", record_id=record_id, occurred_at=at, kind=rec.kind,
        family=family_of(rec), message=rec.message, raw=rec.raw, xid=rec.xid, sxid=rec.sxid,
        pci=rec.device, gpu_uuid=rec.gpu_uuid, pid=rec.pid, process=rec.process, mnemonic=rec.mnemonic,
        category=rec.category, immediate_action=rec.immediate_action,
        investigatory_action=_str(rec.details.get("investigatory_action")),
        description=_str(rec.details.get("description")), catalog_version=rec.catalog_version,
        details={k: v for k, v in rec.details.items() if k not in ("description", "investigatory_action")},
    )


def parse_time(text: str | None) -> datetime | None:
    """An ISO-8601 time from a parsed record; a time without zone is taken as UTC."""
    return parse_stamp(text)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# --- duplicates across sources ----------------------------------------------------------------


def same_fault(
    a_source: str, a_gpu: str | None, a_xid: int | None, a_at: datetime,
    b_source: str, b_gpu: str | None, b_xid: int | None, b_at: datetime,
    window_s: float,
) -> bool:
    """A kernel-log Xid and an NVML Xid event for the same GPU and Xid within the window are one fault."""
    if a_source == b_source or a_gpu is None or a_gpu != b_gpu or a_xid is None or a_xid != b_xid:
        return False
    return abs((a_at - b_at).total_seconds()) <= window_s


# --- incidents --------------------------------------------------------------------------------

IncidentStatus = Literal["open", "resolved"]
ChangeKind = Literal["opened", "updated", "reopened", "resolved", "reclassified"]


@dataclass(frozen=True, slots=True)
class IncidentState:
    incident_id: str
    fingerprint: str
    node: str
    gpu: str
    family: str
    status: IncidentStatus
    count: int
    first_seen: datetime
    last_seen: datetime
    category: str = "unknown"
    reason: str = ""
    codes: tuple[str, ...] = ()
    previous_incident_id: str | None = None
    resolved_at: datetime | None = None
    cordon_requested: bool = False
    component: str = "gpu"
    component_id: str | None = None
    # The occurrence counted last: when it started, and the signals (`models.identity.signal`) it holds.
    occurrence_at: datetime | None = None
    occurrence_signals: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IncidentChange:
    kind: ChangeKind
    incident: IncidentState
    reason: str
    resolved_previous: IncidentState | None = None
    counted: bool = True  # the report counted a new occurrence (False: another view of the last one)


def component_gpu(component: Component) -> str:
    """The `gpu` column of a component's incident: the GPU (or NVSwitch) it is about, else its kind."""
    return component.id if component.kind in (ComponentKind.GPU, ComponentKind.NVSWITCH) else component.kind


def new_incident_id(fingerprint: str, at: datetime) -> str:
    return f"{fingerprint}@{at.strftime('%Y%m%dT%H%M%S.%fZ')}"


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
) -> IncidentChange:
    """Group one fault report into its component's incident.

    Another view of the occurrence counted last (`models.identity.joins_occurrence`) joins it without
    counting; any other report counts a new occurrence of the open incident; after the quiet period,
    or when the latest incident is resolved, a new incident linked to the previous one opens.
    """
    # A recurrence keeps the fingerprint of the incident it follows (a GPU first known by its PCI address).
    fingerprint = current.fingerprint if current is not None else component.fingerprint
    if current is not None and current.status == "open":
        quiet = (at - current.last_seen).total_seconds()
        if quiet <= policy.quiet_period_s:
            codes = current.codes if code in current.codes else (*current.codes, code)
            seen = replace(current, last_seen=max(current.last_seen, at), first_seen=min(current.first_seen, at),
                           codes=codes, family=primary_family(current.family, family))
            if joins_occurrence(current.occurrence_at, current.occurrence_signals, at, signal,
                                policy.occurrence_window_s, policy.duplicate_window_s):
                signals = current.occurrence_signals
                joined = replace(seen, occurrence_signals=signals if signal in signals else (*signals, signal))
                return IncidentChange("updated", joined, f"{code} is another report of the fault counted at "
                                      f"{_hms(current.occurrence_at)} in incident {current.incident_id}", counted=False)
            updated = replace(seen, count=current.count + 1, occurrence_at=at, occurrence_signals=(signal,))
            return IncidentChange("updated", updated, f"{code} repeats incident {current.incident_id}")
        resolved = replace(current, status="resolved", resolved_at=current.last_seen + timedelta(
            seconds=policy.quiet_period_s))
        return IncidentChange(
            "reopened", _fresh(fingerprint, component, node, family, code, signal, at, previous=current.incident_id),
            f"{code} after {quiet:.0f} s of quiet (more than {policy.quiet_period_s:.0f} s): "
            f"incident {current.incident_id} resolved, recurrence opened",
            resolved_previous=resolved,
        )
    if current is not None:  # the latest incident of this fingerprint is resolved: a recurrence
        return IncidentChange(
            "reopened", _fresh(fingerprint, component, node, family, code, signal, at, previous=current.incident_id),
            f"{code} recurs after incident {current.incident_id} was resolved",
        )
    return IncidentChange("opened", _fresh(fingerprint, component, node, family, code, signal, at, previous=None),
                          f"first {code} on {component.kind} {component.id}")


def _hms(at: datetime | None) -> str:
    return at.strftime("%H:%M:%S") if at is not None else "?"


def _fresh(fp: str, component: Component, node: str, family: str, code: str, signal: str, at: datetime,
           previous: str | None) -> IncidentState:
    return IncidentState(
        incident_id=new_incident_id(fp, at), fingerprint=fp, node=node, gpu=component_gpu(component), family=family,
        status="open", count=1, first_seen=at, last_seen=at, codes=(code,), previous_incident_id=previous,
        component=component.kind, component_id=component.id, occurrence_at=at, occurrence_signals=(signal,),
    )


def resolve_if_quiet(incident: IncidentState, last_activity: datetime, now: datetime,
                     policy: PipelinePolicy) -> IncidentChange | None:
    """Resolve an open incident when no fault has arrived for the quiet period (measured on arrival time)."""
    if incident.status != "open":
        return None
    quiet = (now - last_activity).total_seconds()
    if quiet < policy.quiet_period_s:
        return None
    return IncidentChange("resolved", replace(incident, status="resolved", resolved_at=now),
                          f"no fault for {quiet:.0f} s (quiet period {policy.quiet_period_s:.0f} s)")


# --- classification in context ------------------------------------------------------------------


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


def classify_in_context(ctx: ClassifyContext, policy: PipelinePolicy) -> Verdict:
    """Catalog category, turned by context: an application Xid that stays with the GPU across
    different workloads (which run clean on other GPUs) is suspected hardware; one that follows a
    workload across GPUs stays an application fault."""
    verdict = classify(
        FaultGroup(
            family=ctx.family, categories=list(ctx.categories), codes=list(ctx.codes), count=ctx.count,
            workloads=list(ctx.workloads), gpu=ctx.gpu, workload_gpu_spread=dict(ctx.workload_fault_gpus),
            severity=ctx.severity, recovery_action=ctx.recovery_action,
        ),
        ClassifyPolicy(repeat_threshold=policy.repeat_threshold, min_distinct_workloads=policy.min_distinct_workloads),
    )
    if verdict.category == Category.SUSPECTED_HARDWARE:
        clean = {w: n for w, n in ctx.workload_clean_gpus.items() if n > 0 and w in ctx.workloads}
        if clean:
            ran = ", ".join(f"{w} on {n}" for w, n in sorted(clean.items()))
            return Verdict(verdict.category, f"{verdict.reason}; the same workloads ran clean on other GPUs ({ran})",
                           verdict.rule)
    return verdict


# --- actions ----------------------------------------------------------------------------------

ActionKind = Literal["cordon_candidate", "ticket", "notification"]


@dataclass(frozen=True, slots=True)
class ActionRequest:
    kind: ActionKind
    operation: str  # cordon_candidate: "cordon"; ticket: "create" | "reopen" | "comment"; notification: the change
    incident_id: str
    node: str
    gpu: str
    reason: str
    idempotency_key: str


# Components whose incidents are never offered a cordon: an application fault follows its workload, and a
# fleet incident is many nodes' (each node's own incident is offered).
NOT_CORDONED = (ComponentKind.WORKLOAD, ComponentKind.FLEET)


def actions_for(change: IncidentChange, *, version: int) -> list[ActionRequest]:
    """The action requests one incident change makes (each with an idempotency key); `version` is the
    incident row's version after the change.

    Every change but a resolution offers the responder a cordon candidate (keyed by the version): the
    YAML cordon policy, evaluated there on the incident's occurrences, is the only cordon rule set,
    so a candidate it refuses is decided again at the next change.
    """
    inc = change.incident
    out: list[ActionRequest] = []

    def add(kind: ActionKind, operation: str, reason: str, key: str | None = None) -> None:
        out.append(ActionRequest(kind, operation, inc.incident_id, inc.node, inc.gpu, reason,
                                 key or f"{inc.incident_id}:{kind}:{operation}"))

    # The cordon request goes first: it is the one action with a deadline (new work must stop landing
    # on the GPU within a second); tickets and messages can follow it.
    if change.kind != "resolved" and inc.component not in NOT_CORDONED:
        add("cordon_candidate", "cordon", f"{change.kind}: {change.reason}",
            f"{inc.incident_id}:cordon_candidate:v{version}")
    if change.kind in ("opened", "reopened"):
        add("ticket", "create" if change.kind == "opened" else "reopen", change.reason)
        add("notification", change.kind, change.reason)
    elif change.kind == "resolved":
        add("notification", "resolved", change.reason)
    elif change.kind == "reclassified":
        add("notification", "reclassified", change.reason)
        add("ticket", f"comment:{inc.category}", change.reason)
    return out


def action_to_dict(a: ActionRequest) -> dict[str, Any]:
    return {"kind": a.kind, "operation": a.operation, "incident_id": a.incident_id, "node": a.node, "gpu": a.gpu,
            "reason": a.reason, "idempotency_key": a.idempotency_key}


def fleet_burst(family: str, nodes: Sequence[str], policy: PipelinePolicy) -> str | None:
    """Why faults of `family` on these nodes (within the fleet window) are one fleet incident, or None."""
    distinct = sorted(set(nodes))
    if family not in policy.fleet_families or len(distinct) < policy.fleet_min_nodes:
        return None
    shown = ", ".join(distinct[:10]) + (" ..." if len(distinct) > 10 else "")
    return (f"{family} faults on {len(distinct)} nodes within {policy.fleet_window_s:.0f} s "
            f"(threshold {policy.fleet_min_nodes}): {shown}")
