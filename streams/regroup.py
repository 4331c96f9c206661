"""Application faults that stay with a GPU become the GPU's incident.

An application-class fault of a known workload first joins its workload's incident. When the same
GPU then repeats such faults across different workloads that faulted on no other GPU within the
classification window that ends at a fault (`models.grouping.kept_workloads`: NVIDIA's workflow for
Xid 13, 31, 43, ...), the faults of that window are the GPU's: its incident (opened if needed) takes
their fault events, and a workload incident left with none is resolved as merged into it.

The other way: an application fault read before the node state that names its pod (state and
kernel lines travel on different topics) opens its GPU's incident for want of a workload. When the
state arrives, the fault joins its workload's incident (`move_to_workload`), and the GPU incident
left with none is resolved as merged into it: the incidents are those of the other read order.
Either move counts the occurrences of an application incident again in time order (`recount`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import MAX_LISTED
from history.tables import FaultEvent, Incident
from models.grouping import recount_events
from models.identity import Component
from models.incidents import component_gpu, new_incident_id
from models.stream_policy import PipelinePolicy
from models.vocabulary import ComponentKind

log = logging.getLogger(__name__)


def move_to_gpu(s: Session, node: str, gpu: str, workloads: list[str], *, row: Incident | None, since: datetime,
                until: datetime, now: datetime, policy: PipelinePolicy,
                on_merged: Callable[[Incident, str], None]) -> Incident | None:
    """Put the GPU's application fault events of `workloads` (from `since` to `until`) into its incident
    `row` (a new one when None or not open); resolve the workload incidents left empty as merged into
    it. Returns the GPU's incident, or None when there was nothing to move."""
    in_gpu_incidents = sa.select(Incident.incident_id).where(Incident.node == node, Incident.component == "gpu")
    where = (FaultEvent.node == node, FaultEvent.gpu == gpu, FaultEvent.family == "application",
             FaultEvent.occurred_at >= since, FaultEvent.occurred_at <= until, FaultEvent.workload.in_(workloads),
             FaultEvent.incident_id.not_in(in_gpu_incidents))  # those of the GPU's incidents stay there
    events = s.execute(sa.select(FaultEvent.incident_id, FaultEvent.occurred_at, FaultEvent.node, FaultEvent.gpu,
                                 FaultEvent.code, FaultEvent.pod, FaultEvent.namespace, FaultEvent.container,
                                 FaultEvent.workload, FaultEvent.gpu_uuid, FaultEvent.serial, FaultEvent.pci,
                                 FaultEvent.pid, FaultEvent.process)
                       .where(*where).order_by(FaultEvent.occurred_at, FaultEvent.id)).all()
    if row is not None and row.status != "open":
        row = None
    if row is None:
        if not events:
            return None
        row = _open(s, Component(ComponentKind.GPU, node, gpu), events, now)
    left = {e.incident_id for e in events if e.incident_id}
    s.execute(sa.update(FaultEvent).where(*where).values(incident_id=row.incident_id))
    reason = (f"its faults on {gpu} stay with the GPU (different workloads fault there): merged into "
              f"incident {row.incident_id}")
    _moved(s, row, events, left, now, policy, reason, on_merged)
    return row


def move_to_workload(s: Session, workload: str, events: list[FaultEvent], *, row: Incident | None,
                     now: datetime, policy: PipelinePolicy, on_merged: Callable[[Incident, str], None]) -> Incident:
    """Put application fault events first grouped without their pod (the node state that names it was
    read after them) into their workload's incident `row` (a new one when None or not open); resolve
    the incidents left empty (the GPU incidents they opened) as merged into it. Returns the workload's
    incident."""
    if row is not None and row.status != "open":
        row = None
    if row is None:
        row = _open(s, Component(ComponentKind.WORKLOAD, "", workload), events, now)
    left = {e.incident_id for e in events if e.incident_id}
    for e in events:
        e.incident_id = row.incident_id
    s.flush()
    reason = (f"its faults were workload {workload}'s (node state read after them named the pod): merged into "
              f"incident {row.incident_id}")
    _moved(s, row, events, left, now, policy, reason, on_merged)
    return row


def _moved(s: Session, row: Incident, events: Sequence[Any], left: set[str], now: datetime, policy: PipelinePolicy,
           reason: str, on_merged: Callable[[Incident, str], None]) -> None:
    """After `events` moved into `row` from the incidents `left`: the lists and counts of all of them
    (one left with no event is resolved as merged into `row`)."""
    for e in sorted(events, key=lambda e: e.occurred_at):
        row.gpu_uuid, row.serial, row.pci = row.gpu_uuid or e.gpu_uuid, row.serial or e.serial, row.pci or e.pci
    recount(s, row, policy)
    for incident_id in sorted(left - {row.incident_id}):
        other = s.get(Incident, incident_id)
        if other is None:
            continue
        for name in ("immediate_action", "investigatory_action", "description", "catalog_version", "driver_version"):
            if getattr(row, name) is None:
                setattr(row, name, getattr(other, name))  # the catalog's text of the faults it took
        if recount(s, other, policy):
            continue  # it keeps faults of its own
        # Left with none: part of `row` (resolved already when it went quiet before its faults moved).
        if other.status == "open":
            other.status, other.resolved_at = "resolved", now
        other.updated_at, other.merged_into = now, row.incident_id
        other.version += 1
        other.reason = reason
        log.info("incident %s merged into %s", other.incident_id, row.incident_id,
                 extra={"node": other.node, "gpu": other.gpu, "incident": other.incident_id})
        on_merged(other, reason)


def recount(s: Session, row: Incident, policy: PipelinePolicy) -> int:
    """An incident's count, times, codes, pods, processes and workloads from its fault events, in
    time order (after events moved); its occurrences as the engine counts them again
    (`models.grouping.recount_events`)."""
    events = s.execute(sa.select(FaultEvent.id, FaultEvent.occurred_at, FaultEvent.code, FaultEvent.family,
                                 FaultEvent.sources, FaultEvent.counted, FaultEvent.namespace, FaultEvent.pod,
                                 FaultEvent.container, FaultEvent.pid, FaultEvent.process, FaultEvent.workload)
                       .where(FaultEvent.incident_id == row.incident_id)
                       .order_by(FaultEvent.occurred_at, FaultEvent.id)).all()
    row.codes = _listed(e.code for e in events)
    row.pods = _listed(f"{e.namespace}/{e.pod}/{e.container}" if e.pod else None for e in events)
    row.processes = _listed(f"{e.process or '?'}[{e.pid}]" if e.pid is not None else None for e in events)
    row.workloads = _listed(e.workload for e in events)
    counts = recount_events(events, policy)
    if counts.occurrence is not None:  # counted again in time order: the events' marks follow
        row.occurrence_at, signals = counts.occurrence
        row.occurrence_signals = list(signals)
        for flag in (True, False):
            ids = [e.id for e, c in zip(events, counts.counted, strict=True)
                   if c is flag and c != (e.counted is not False)]
            if ids:
                s.execute(sa.update(FaultEvent).where(FaultEvent.id.in_(ids)).values(counted=flag))
    row.count = counts.count
    if events:  # every report, counted or not, as grouping sets them
        row.first_seen, row.last_seen = events[0].occurred_at, max(e.occurred_at for e in events)
    return row.count


def _listed(values: Iterable[str | None]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))[:MAX_LISTED]


def _open(s: Session, comp: Component, events: Sequence[Any], now: datetime) -> Incident:
    """A new application incident of `comp` for `events` (fault event rows), opened at the first."""
    first_event = min(events, key=lambda e: e.occurred_at)
    first = first_event.occurred_at
    assert isinstance(first, datetime)
    node = comp.node or first_event.node  # a workload's: the node it first faulted on
    row = Incident(
        incident_id=new_incident_id(comp.fingerprint, first), fingerprint=comp.fingerprint, node=node,
        gpu=component_gpu(comp), family="application", status="open",
        category="application", reason="", count=0, first_seen=first, last_seen=first, opened_at=now, updated_at=now,
        resolved_at=None, previous_incident_id=None, gpu_uuid=None, serial=None, pci=None, codes=[], pods=[],
        processes=[], workloads=[], immediate_action=None, investigatory_action=None, description=None,
        cordon_requested=False, version=1, component=comp.kind, component_id=comp.id, occurrence_at=None,
        occurrence_signals=[],
    )
    s.add(row)
    s.flush()
    return row
