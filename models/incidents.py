"""Fault events and incidents: what the stream decides for each fault, as pure functions.

- `observation_from_kernel` / `observation_from_nvml` / `observation_from_missing` turn what a node
  published into one `FaultObservation` (with the catalog's recommendation).
- `same_fault` says whether a kernel-log Xid and an NVML Xid event are one fault.
- `apply_fault` groups a fault into the open incident of its (node, GPU, family) fingerprint, opens
  one, or reopens after a quiet period (a new incident linked to the resolved one).
- `resolve_if_quiet` resolves an incident nobody has seen a fault for in the quiet period.
- `classify_in_context` decides application vs suspected hardware from the workloads involved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from models.catalog import Catalog, load_catalog
from models.classify import ClassifyPolicy, FaultGroup, Verdict, classify
from models.event_time import record_time
from models.families import family_of
from models.identity import Component, joins_occurrence, primary_family
from models.kernlog.clock import parse_stamp
from models.kernlog.record import FaultRecord
from models.node_records import GpuMissing, KernelLine, NvmlEvent
from models.stream_policy import PipelinePolicy

FaultSource = Literal["kernel", "nvml"]


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
        if self.kind == "xid" and self.xid is not None:
            return f"Xid {self.xid}"
        if self.kind == "sxid" and self.sxid is not None:
            return f"SXid {self.sxid}"
        return {"gpu_fallen_off_bus": "fallen off the bus", "pcie_aer": "AER", "ecc": "ECC",
                "gpu_missing": "GPU missing"}.get(self.kind, self.kind)

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


_NVML_KINDS = {"double_bit_ecc": "ecc", "gpu_unavailable": "gpu_fallen_off_bus"}


def observation_from_nvml(event: NvmlEvent, catalog: Catalog | None = None) -> FaultObservation | None:
    """An NVML event that reports a fault; None for events that are not faults (single-bit ECC, MIG changes)."""
    cat = catalog or load_catalog()
    raw = event.model_dump_json()
    common: dict[str, Any] = {
        "node": event.node, "source": "nvml", "record_id": event.record_id, "occurred_at": event.observed_at,
        "raw": raw, "pci": event.pci_bus_id, "gpu_uuid": event.gpu_uuid,
        "gpu_instance_id": event.gpu_instance_id, "catalog_version": cat.version,
    }
    if event.event_type == "xid_critical" and event.xid is not None:
        info = cat.xid(event.xid)
        rec = FaultRecord(line=0, kind="xid", raw=raw, message="", xid=event.xid,
                          category=info.category if info else "unknown")
        return FaultObservation(
            **common, kind="xid", family=family_of(rec), message=info.description if info else f"Xid {event.xid}",
            xid=event.xid, mnemonic=info.mnemonic if info else None, category=rec.category,
            immediate_action=info.immediate_action if info else None,
            investigatory_action=info.investigatory_action if info else None,
            description=info.description if info else None,
        )
    kind = _NVML_KINDS.get(event.event_type)
    if kind is None and event.event_type == "recovery_action":
        return FaultObservation(**common, kind="driver_error", family="recovery_action",
                                message=f"GPU recovery action {event.event_data}", category="driver",
                                details={"recovery_action_new": event.event_data})
    if kind is None:
        return None
    family = "memory" if kind == "ecc" else "gpu_lost"
    return FaultObservation(**common, kind=kind, family=family, message=event.event_type.replace("_", " "),
                            category="hardware")


def observation_from_missing(rec: GpuMissing) -> FaultObservation:
    return FaultObservation(
        node=rec.node, source="nvml", record_id=rec.record_id, occurred_at=rec.observed_at, kind="gpu_missing",
        family="gpu_lost", message=f"GPU missing ({rec.reason}: {rec.observed_count}/{rec.expected_count} visible)",
        raw=rec.model_dump_json(), pci=rec.pci_bus_id, gpu_uuid=rec.gpu_uuid, category="hardware",
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
    return component.id if component.kind in ("gpu", "nvswitch") else component.kind


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
    if verdict.category == "suspected_hardware":
        clean = {w: n for w, n in ctx.workload_clean_gpus.items() if n > 0 and w in ctx.workloads}
        if clean:
            ran = ", ".join(f"{w} on {n}" for w, n in sorted(clean.items()))
            return Verdict(verdict.category, f"{verdict.reason}; the same workloads ran clean on other GPUs ({ran})",
                           verdict.rule)
    return verdict


def fleet_burst(family: str, nodes: Sequence[str], policy: PipelinePolicy) -> str | None:
    """Why faults of `family` on these nodes (within the fleet window) are one fleet incident, or None."""
    distinct = sorted(set(nodes))
    if family not in policy.fleet_families or len(distinct) < policy.fleet_min_nodes:
        return None
    shown = ", ".join(distinct[:10]) + (" ..." if len(distinct) > 10 else "")
    return (f"{family} faults on {len(distinct)} nodes within {policy.fleet_window_s:.0f} s "
            f"(threshold {policy.fleet_min_nodes}): {shown}")
