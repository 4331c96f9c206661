"""The single-node scan: records → incidents per fault of one component (`models.identity`), each classified."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from models.classify import ClassifyPolicy, FaultGroup, classify
from models.families import family_of
from models.identity import (
    Component,
    attaches_to_gpu_fault,
    companion_group,
    component_of,
    joins_occurrence,
    occurrence_group,
    primary_family,
    signal,
)
from models.incidents import parse_time
from models.kernlog.record import FaultRecord
from models.vocabulary import ComponentKind

_SEVERITY_ORDER = {"corrected": 0, "non-fatal": 1, "fatal": 2}


@dataclass(slots=True)
class ScanIncident:
    host: str
    gpu: str
    family: str
    pci: str | None
    gpu_uuid: str | None
    serial: str | None
    records: list[FaultRecord] = field(default_factory=list)
    category: str = "unknown"
    reason: str = ""
    fingerprint: str = ""
    component: str = "gpu"
    count: int = 0  # fault occurrences: every report of one fault counts once
    occurrence_at: datetime | None = None
    occurrence_signals: list[str] = field(default_factory=list)

    def add(self, rec: FaultRecord, family: str, window_s: float, group: str | None = None) -> None:
        """Count the record as a new occurrence, or as another report of the last one."""
        self.records.append(rec)
        if group is None:  # a report attached to another group's fault leaves the label alone
            self.family = primary_family(self.family, family)
        at = _at(rec)
        sig = signal(family, "kernel", _code(rec), group)
        if at is not None and joins_occurrence(self.occurrence_at, self.occurrence_signals, at, sig, window_s, 5.0):
            if sig not in self.occurrence_signals:
                self.occurrence_signals.append(sig)
            return
        self.count += 1
        self.occurrence_at, self.occurrence_signals = at, [sig]

    def codes(self) -> list[str]:
        seen: dict[str, None] = {}
        for r in self.records:
            seen[_code(r)] = None
        return list(seen)

    def to_dict(self) -> dict[str, Any]:
        first, last = self.records[0], self.records[-1]
        processes: dict[str, None] = {}
        for r in self.records:
            if r.pid is not None or r.process:
                processes[f"{r.process or '?'}[{r.pid if r.pid is not None else '?'}]"] = None
        actions: dict[str, None] = {r.immediate_action: None for r in self.records if r.immediate_action}
        return {
            "fingerprint": self.fingerprint,
            "component": self.component,
            "host": self.host,
            "gpu": self.gpu,
            "pci": self.pci,
            "gpu_uuid": self.gpu_uuid,
            "serial": self.serial,
            "family": self.family,
            "category": self.category,
            "reason": self.reason,
            "count": self.count,
            "codes": self.codes(),
            "mnemonics": sorted({r.mnemonic for r in self.records if r.mnemonic}),
            "immediate_actions": list(actions),
            "processes": list(processes),
            "first_seen": _when(first),
            "last_seen": _when(last),
            "first_line": first.line,
            "last_line": last.line_end,
            "catalog_version": first.catalog_version,
        }


def _code(r: FaultRecord) -> str:
    if r.kind == "xid":
        return f"Xid {r.xid}"
    if r.kind == "sxid":
        return f"SXid {r.sxid}"
    if r.kind == "driver_error":
        return str(r.details.get("error", "driver error"))
    return {"gpu_fallen_off_bus": "fallen off the bus", "pcie_aer": "AER", "ecc": "ECC"}.get(r.kind, r.kind)


def _at(r: FaultRecord) -> datetime | None:
    """The record's time: its own stamp, else its uptime (on the scan's one clock per input)."""
    at = parse_time(r.timestamp)
    if at is None and r.uptime_s is not None:
        at = _EPOCH + timedelta(seconds=r.uptime_s)
    return at


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _when(r: FaultRecord) -> str | None:
    if r.timestamp:
        return r.timestamp
    if r.uptime_s is not None:
        return f"uptime {r.uptime_s:.6f}s"
    return None


def scan(
    records: Iterable[tuple[str, FaultRecord]],
    policy: ClassifyPolicy | None = None,
    occurrence_window_s: float = 120.0,
) -> list[ScanIncident]:
    """Group (default host, record) pairs into classified incidents, in order of first appearance.

    The default host names the input a record came from when the line itself carries no host.
    Identity lines (`GPU at PCI:...: GPU-<uuid>`, serial number) give each PCI address its UUID and
    serial, wherever in the input they appear.
    """
    faults: list[tuple[str, FaultRecord]] = []
    identity: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    for default_host, rec in records:
        host = rec.host or default_host
        if rec.kind == "gpu_identity":
            if rec.pci:
                old_uuid, old_serial = identity.get((host, rec.pci), (None, None))
                identity[(host, rec.pci)] = (rec.gpu_uuid or old_uuid, rec.serial or old_serial)
            continue
        faults.append((host, rec))

    incidents: dict[str, ScanIncident] = {}  # by fingerprint
    for host, rec in faults:
        pci = rec.device
        uuid, serial = identity.get((host, pci), (None, None)) if pci else (None, None)
        if uuid and not rec.gpu_uuid:
            rec.gpu_uuid = uuid
        if serial and not rec.serial:
            rec.serial = serial
        family = family_of(rec)
        comp = component_of(node=host, kind=rec.kind, family=family, pci=pci, gpu_uuid=rec.gpu_uuid)
        group = None
        how = attaches_to_gpu_fault(family, rec.details.get("error")) if comp.kind == "node" else None
        if how is not None:
            joined = _companion(incidents.values(), host, family, how == "any", _at(rec), occurrence_window_s)
            if joined is not None:
                comp = Component(ComponentKind.GPU, host, joined.gpu)
                group = occurrence_group(joined.occurrence_signals)
        inc = incidents.get(comp.fingerprint)
        if inc is None:
            gpu = comp.id if comp.kind in ("gpu", "nvswitch") else comp.kind
            inc = incidents[comp.fingerprint] = ScanIncident(
                host, gpu, family, pci, rec.gpu_uuid, rec.serial, fingerprint=comp.fingerprint, component=comp.kind)
        inc.add(rec, family, occurrence_window_s, group)

    # Which GPUs each workload faulted on (application faults only), across the whole input.
    spread: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for inc in incidents.values():
        if inc.family == "application":
            for r in inc.records:
                w = _workload(r)
                if w:
                    spread[w].add((inc.host, inc.gpu))

    for inc in incidents.values():
        workloads = sorted({w for r in inc.records if (w := _workload(r))})
        severity = max((r.details.get("severity", "corrected") for r in inc.records if r.kind == "pcie_aer"),
                       key=lambda s: _SEVERITY_ORDER.get(s, 0), default=None)
        verdict = classify(
            FaultGroup(
                family=inc.family,
                categories=[r.category for r in inc.records if r.category],
                codes=inc.codes(),
                count=inc.count,
                workloads=workloads,
                gpu=inc.gpu_uuid or (f"{'NVSwitch' if inc.family == 'nvswitch' else 'GPU'} {inc.pci}"
                                     if inc.pci else "the node"),
                workload_gpu_spread={w: len(spread[w]) for w in workloads},
                severity=severity,
                recovery_action=next((str(r.details["recovery_action_new"]) for r in reversed(inc.records)
                                      if "recovery_action_new" in r.details), None),
            ),
            policy,
        )
        inc.category, inc.reason = verdict.category, verdict.reason
    return list(incidents.values())


def _companion(incidents: Iterable[ScanIncident], host: str, family: str, any_group: bool, at: datetime | None,
               window_s: float) -> ScanIncident | None:
    """The latest GPU incident of the host whose last occurrence a node-level report belongs to (a
    "GPU lost" assertion joins the Xid 79 it came with; a crash dump whatever fatal fault it follows)."""
    group = companion_group(family)

    def near(i: ScanIncident) -> bool:
        return at is None or i.occurrence_at is None or abs((at - i.occurrence_at).total_seconds()) <= window_s

    return next((i for i in reversed(list(incidents)) if i.host == host and i.component == "gpu"
                 and i.occurrence_signals and (any_group or occurrence_group(i.occurrence_signals) == group)
                 and near(i)), None)


def _workload(r: FaultRecord) -> str | None:
    if r.process:
        return r.process
    if r.pid is not None:
        return f"pid {r.pid}"
    return None
