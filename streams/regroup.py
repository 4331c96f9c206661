"""Application faults that stay with a GPU become the GPU's incident.

An application-class fault of a known workload first joins its workload's incident. When the same
GPU then repeats such faults across different workloads that faulted on no other GPU
(`models.identity.stays_with_gpu`: NVIDIA's workflow for Xid 13, 31, 43, ...), the faults are the
GPU's: its incident (opened if needed) takes their fault events, and a workload incident left with
none is resolved as merged into it. Later application faults on that GPU join it directly
(`streams.components`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import add_listed
from history.tables import FaultEvent, Incident
from models.identity import Component, stays_with_gpu
from models.incidents import new_incident_id
from models.stream_policy import PipelinePolicy
from streams.classification import AppContext

log = logging.getLogger(__name__)

_COUNTED = FaultEvent.counted.is_not(False)


def gpus_keeping_faults(contexts: dict[tuple[str, str], AppContext],
                        policy: PipelinePolicy) -> dict[tuple[str, str], list[str]]:
    """The (node, GPU)s whose application faults stay with them, with the workloads that faulted
    only there."""
    out: dict[tuple[str, str], list[str]] = {}
    for pair, ctx in contexts.items():
        only_here = [w for w in ctx.workloads if ctx.fault_gpus.get(w, 0) < 2]
        if stays_with_gpu(len(only_here), ctx.count, repeat_threshold=policy.repeat_threshold,
                          min_distinct_workloads=policy.min_distinct_workloads):
            out[pair] = only_here
    return out


def move_to_gpu(s: Session, node: str, gpu: str, workloads: list[str], *, row: Incident | None, since: datetime,
                now: datetime, on_merged: Callable[[Incident, str], None]) -> Incident | None:
    """Put the GPU's application fault events of `workloads` (since `since`) into its incident `row`
    (a new one when None or not open); resolve the workload incidents left empty as merged into it.
    Returns the GPU's incident, or None when there was nothing to move."""
    where = (FaultEvent.node == node, FaultEvent.gpu == gpu, FaultEvent.family == "application",
             FaultEvent.occurred_at >= since, FaultEvent.workload.in_(workloads))
    events = s.execute(sa.select(FaultEvent.incident_id, FaultEvent.occurred_at, FaultEvent.code, FaultEvent.pod,
                                 FaultEvent.namespace, FaultEvent.container, FaultEvent.workload, FaultEvent.gpu_uuid,
                                 FaultEvent.serial, FaultEvent.pci).where(*where)).all()
    if row is not None and row.status != "open":
        row = None
    if row is None:
        if not events:
            return None
        row = _open(s, node, gpu, events, now)
    moved_from = {e.incident_id for e in events if e.incident_id and e.incident_id != row.incident_id}
    s.execute(sa.update(FaultEvent).where(*where).values(incident_id=row.incident_id))
    for e in events:
        add_listed(row, "pods", f"{e.namespace}/{e.pod}/{e.container}" if e.pod else None)
        add_listed(row, "workloads", e.workload)
        row.gpu_uuid, row.serial, row.pci = row.gpu_uuid or e.gpu_uuid, row.serial or e.serial, row.pci or e.pci
    recount(s, row)
    for incident_id in sorted(moved_from):
        other = s.get(Incident, incident_id)
        if other is None or other.status != "open":
            continue
        if recount(s, other) == 0:
            other.status, other.resolved_at, other.updated_at, other.merged_into = "resolved", now, now, row.incident_id
            other.version += 1
            reason = (f"its faults on {gpu} stay with the GPU (different workloads fault there): merged into "
                      f"incident {row.incident_id}")
            other.reason = reason
            log.info("incident %s merged into %s", other.incident_id, row.incident_id,
                     extra={"node": node, "gpu": gpu, "incident": other.incident_id})
            on_merged(other, reason)
    return row


def recount(s: Session, row: Incident) -> int:
    """An incident's count, times and codes from its fault events (after events moved)."""
    n, first, last = s.execute(sa.select(sa.func.count(), sa.func.min(FaultEvent.occurred_at),
                                         sa.func.max(FaultEvent.occurred_at))
                               .where(FaultEvent.incident_id == row.incident_id, _COUNTED)).one()
    if n:
        codes = s.scalars(sa.select(FaultEvent.code).distinct().where(FaultEvent.incident_id == row.incident_id))
        row.count, row.first_seen, row.last_seen = int(n), first, last
        row.codes = list(dict.fromkeys([*(row.codes or []), *sorted(codes)]))
    else:
        row.count = 0
    return int(n or 0)


def _open(s: Session, node: str, gpu: str, events: Sequence[Any], now: datetime) -> Incident:
    comp = Component("gpu", node, gpu)
    first = min(e.occurred_at for e in events)
    assert isinstance(first, datetime)
    row = Incident(
        incident_id=new_incident_id(comp.fingerprint, first), fingerprint=comp.fingerprint, node=node, gpu=gpu,
        family="application", status="open", category="application", reason="", count=0, first_seen=first,
        last_seen=first, opened_at=now, updated_at=now, resolved_at=None, previous_incident_id=None, gpu_uuid=None,
        serial=None, pci=None, codes=[], pods=[], processes=[], workloads=[], immediate_action=None,
        investigatory_action=None, description=None, cordon_requested=False, version=1, component="gpu",
        component_id=gpu, occurrence_at=None, occurrence_signals=[],
    )
    s.add(row)
    s.flush()
    return row


def window_start(until: datetime, policy: PipelinePolicy) -> datetime:
    return until - timedelta(seconds=policy.classify_window_s)
