"""The single-node scan: kernel-log records → the incidents the pipeline finds in them, classified.

Records (`xidpipe parse` output) and, when given, the nodes' recorded state (inventories, pod
assignments and processes, what `xidpipe replay` reads from `state.jsonl`) go through the stream's
own rules: each fault is attributed with the state valid at its time (`models.correlate`), then
grouped, counted and classified by the grouping engine (`models.grouping`) on a table of incidents
in memory (`models.incident_table`). The incidents are those `xidpipe replay` and the stream find for
the same input: the same components, codes, occurrence counts, families and categories.

A record's time is its own stamp, else its uptime plus its node's boot time (the latest recorded
inventory's; without one, the scan's epoch: one clock per input), else the time of the record before
it on its node. Faults are grouped as the stream groups them (`models.grouping.in_grouping_order`):
moment by moment (a node's reports within `occurrence_window_s` of the first) in event time, those
of a moment that name a GPU first. Identity
lines (`GPU at PCI:...: GPU-<uuid>`, serial number) give each PCI address its UUID and serial,
wherever in the input they appear. One kernel record read from several files of a node (kern.log
and syslog) is one report (`models.record_identity`): its first copy. Without pod assignments an
application fault stays with its GPU (its workload is its process, `process:<name>`), as in the
stream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from models.correlate import (
    IdentityLine,
    InventorySnapshot,
    NodeHistory,
    PodSnapshot,
    ProcessSnapshot,
    correlate,
    workload_name,
)
from models.event_time import boot_times, record_event_time
from models.grouping import Grouper, in_grouping_order, report_of
from models.identity import gpu_key
from models.incident_table import Assignment, IncidentTable, ScanEvent, ScanIncident
from models.incidents import observation_from_record
from models.kernlog.record import FaultRecord
from models.node_records import GpuInventory, GpuProcesses, NodeRecord, PodAssignments
from models.pci import normalize_pci
from models.port_reports import tie_port_report
from models.record_identity import first_copies, record_identity
from models.stream_policy import PipelinePolicy

__all__ = ["ScanIncident", "scan"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # the clock of a node whose uptimes have no recorded boot time


def scan(
    records: Iterable[tuple[str, FaultRecord]],
    policy: PipelinePolicy | None = None,
    state: Iterable[NodeRecord] = (),
) -> list[ScanIncident]:
    """Group (default host, record) pairs into classified incidents, in the order they opened.

    The default host names the input a record came from when the line itself carries no host.
    `state`: the nodes' recorded inventories, pod assignments and processes (other records are
    ignored). Incidents merged into another (a workload's faults found to stay with its GPU) are
    part of that one and not listed.
    """
    p = policy or PipelinePolicy()
    known = list(state)
    histories = _histories(known)
    boots = boot_times(known)
    events = _events(records, histories, boots, p)
    table = IncidentTable(p, assignments=_assignments(known))
    grouper = Grouper(table, p)
    for event in in_grouping_order(events, lambda e: e.report, p.occurrence_window_s):
        # A fault the GPU keeps at once goes to its incident, as in the stream (`IncidentTable.keeps_at_once`).
        report = replace(event.report, workload=None) if table.keeps_at_once(event) else event.report
        table.apply(*grouper.group(report), event)
    table.finish()
    return table.incidents()


def _events(records: Iterable[tuple[str, FaultRecord]], histories: dict[str, NodeHistory],
            boots: dict[str, datetime], p: PipelinePolicy) -> list[ScanEvent]:
    """The fault reports of the input, attributed, in input order; identity lines go to the histories."""
    faults: list[tuple[int, FaultRecord, datetime, str]] = []
    previous: dict[str, datetime] = {}  # per node: the time of its record before
    for seq, (default_host, rec) in enumerate(records):
        host = rec.host or default_host
        at = record_event_time(rec, boot_time=boots.get(host, EPOCH), line_at=None,
                               read_at=previous.get(host, EPOCH)).at
        previous[host] = at
        if rec.kind != "gpu_identity":
            faults.append((seq, rec, at, host))
            continue
        pci = normalize_pci(rec.pci)
        if pci:
            histories.setdefault(host, NodeHistory(host)).identities.append(
                IdentityLine(at, pci, rec.gpu_uuid, rec.serial))
    for history in histories.values():
        history.sort()
    out: list[ScanEvent] = []
    # One kernel record read from several files (kern.log and syslog) is one report: its first copy.
    for seq, rec, at, host in first_copies(faults, lambda f: (f[3], record_identity(f[1]))):
        history = histories.get(host) or NodeHistory(host)
        obs = tie_port_report(observation_from_record(rec, node=host, record_id=f"scan:{seq}", at=at), history, at,
                              p.clock_skew_s)
        attr = correlate(history, at, pci=obs.pci, gpu_uuid=obs.gpu_uuid,
                         pid=obs.pid, process=obs.process, skew_s=p.clock_skew_s)
        out.append(ScanEvent(seq, rec, obs, attr, report_of(obs, attr),
                             gpu=gpu_key(attr.gpu.uuid, attr.gpu.pci or normalize_pci(obs.pci)),
                             when=_when(rec, at, host in boots)))
    return out


def _when(rec: FaultRecord, at: datetime, booted: bool) -> str | None:
    """A record's time as the scan shows it: its own stamp; for an uptime, the wall-clock time its
    node's recorded boot time gives, else the uptime itself; nothing for a record with neither."""
    if rec.timestamp:
        return rec.timestamp
    if rec.uptime_s is not None:
        return at.isoformat() if booted else f"uptime {rec.uptime_s:.6f}s"
    return None


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # as the stream reads a time without zone


def _histories(state: list[NodeRecord]) -> dict[str, NodeHistory]:
    """Each node's state history, as the stream keeps it (`node_states`): snapshots by the time they
    became true."""
    out: dict[str, NodeHistory] = {}
    for rec in state:
        if isinstance(rec, GpuInventory):
            out.setdefault(rec.node, NodeHistory(rec.node)).inventories.append(
                InventorySnapshot(_utc(rec.emitted_at), rec.gpus))
        elif isinstance(rec, PodAssignments):
            out.setdefault(rec.node, NodeHistory(rec.node)).pods.append(
                PodSnapshot(_utc(rec.changed_at), rec.assignments))
        elif isinstance(rec, GpuProcesses):
            out.setdefault(rec.node, NodeHistory(rec.node)).processes.append(
                ProcessSnapshot(_utc(rec.emitted_at), rec.processes))
    return out


def _assignments(state: list[NodeRecord]) -> list[Assignment]:
    """Which workload held which GPU when (the stream's `gpu_assignments`): where workloads ran clean."""
    return [Assignment(rec.node, a.gpu_id, workload_name(a.namespace, a.pod, a.container, None) or "?",
                       _utc(rec.changed_at))
            for rec in state if isinstance(rec, PodAssignments) for a in rec.assignments]
