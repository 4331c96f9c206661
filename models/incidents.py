"""Fault observations and incidents as values: what a node reported, and an incident's state.

- `observation_from_kernel` / `observation_from_record` turn a parsed kernel fault into one
  `FaultObservation` (with the catalog's recommendation); a health signal's records map to
  observations in their own folder (`models.signals`, e.g. `models.signals.nvml.mapping`).
- `IncidentState` and `IncidentChange`: an incident as the grouping engine (`models.grouping`) and
  the action rules (`models.actions`) take it, and what one report or decision did to it.
- `resolve_if_quiet` resolves an incident nobody has seen a fault for in the quiet period.
- `fleet_burst` says why faults of one family on many nodes are one fleet incident.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from models.event_time import record_time
from models.families import family_of
from models.identity import Component
from models.kernlog.clock import parse_stamp
from models.kernlog.record import FaultRecord
from models.node_records import KernelLine
from models.record_identity import RecordIdentity, record_identity
from models.stream_policy import PipelinePolicy
from models.vocabulary import ComponentKind, report_code

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
    # The kernel record it is a copy of (`models.record_identity`): another copy is the same report.
    record_key: str | None = None
    boot_id: str | None = None

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
    record_id = line.record_id if index == 0 else f"{line.record_id}#{index}"
    ident = record_identity(rec, source=line.source, boot_id=line.boot_id, seq=line.seq if index == 0 else None,
                            monotonic_us=line.monotonic_us, continuation=line.continuation)
    return observation_from_record(rec, node=line.node, record_id=record_id, at=record_time(rec, line).at,
                                   identity=ident)


def observation_from_record(rec: FaultRecord, *, node: str, record_id: str, at: datetime,
                            identity: RecordIdentity | None = None) -> FaultObservation:
    """A parsed kernel fault of `node` at the event time `at` (`xidpipe scan` reads records without
    the agent's line around them: its identity is then what the record itself says)."""
    ident = identity if identity is not None else record_identity(rec)
    return FaultObservation(
        node=node, source="kernel", record_id=record_id, occurred_at=at, kind=rec.kind,
        family=family_of(rec), message=rec.message, raw=rec.raw, xid=rec.xid, sxid=rec.sxid,
        pci=rec.device, gpu_uuid=rec.gpu_uuid, pid=rec.pid, process=rec.process, mnemonic=rec.mnemonic,
        category=rec.category, immediate_action=rec.immediate_action,
        investigatory_action=_str(rec.details.get("investigatory_action")),
        description=_str(rec.details.get("description")), catalog_version=rec.catalog_version,
        details=_details(rec), record_key=ident.key, boot_id=ident.boot,
    )


def _details(rec: FaultRecord) -> dict[str, Any]:
    """The record's details as an observation keeps them; a root port's AER report names its port
    (`models.port_reports` ties it to the GPU below)."""
    out = {k: v for k, v in rec.details.items() if k not in ("description", "investigatory_action")}
    if rec.kind == "pcie_aer" and rec.details.get("subject") == "port" and (rec.source_pci or rec.pci):
        out["port"] = rec.source_pci or rec.pci
    return out


def parse_time(text: str | None) -> datetime | None:
    """An ISO-8601 time from a parsed record; a time without zone is taken as UTC."""
    return parse_stamp(text)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


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
    gpu_uuid: str | None = None  # the GPU's UUID once known (an incident opened under its PCI address keeps it)
    # The processes the occurrence counted last named (a contained Xid 94's: only it follows the fault).
    occurrence_pids: tuple[int, ...] = ()
    # NVIDIA's current instruction for the GPU: the recovery action its latest Xid 154 decoded (GPU_RESET, ...).
    recovery_action: str | None = None


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


def fleet_burst(family: str, nodes: Sequence[str], policy: PipelinePolicy) -> str | None:
    """Why faults of `family` on these nodes (within the fleet window) are one fleet incident, or None."""
    distinct = sorted(set(nodes))
    if family not in policy.fleet_families or len(distinct) < policy.fleet_min_nodes:
        return None
    shown = ", ".join(distinct[:10]) + (" ..." if len(distinct) > 10 else "")
    return (f"{family} faults on {len(distinct)} nodes within {policy.fleet_window_s:.0f} s "
            f"(threshold {policy.fleet_min_nodes}): {shown}")
