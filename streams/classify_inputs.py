"""What classification needs from SQL: what the workloads of an incident did elsewhere.

For application-class incidents the workloads that faulted on the GPU within `classify_window_s`
before the incident's last fault (a sympathetic report of a hardware fault is no fault of its
workload's: `models.sympathetic`), the GPUs where they faulted, and the GPUs where they ran clean
(`models.grouping.AppContext`); for a workload's incident its GPUs and nodes; each incident's
driver version. The verdict itself is the engine's (`models.grouping.incident_verdict`).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import FaultEvent, GpuAssignment, Incident, NodeState
from models.grouping import AppContext


def workload_spreads(s: Session, rows: list[Incident]) -> dict[str, AppContext]:
    """For each workload incident: on how many GPUs (`fault_gpus[workload]`) and nodes (`count`) it faulted."""
    if not rows:
        return {}
    out: dict[str, AppContext] = {}
    ids = [r.incident_id for r in rows]
    spread: dict[str, tuple[int, int]] = {}
    for incident_id, gpus, nodes in s.execute(
        sa.select(FaultEvent.incident_id, sa.func.count(sa.distinct(FaultEvent.node + "/" + FaultEvent.gpu)),
                  sa.func.count(sa.distinct(FaultEvent.node))).where(FaultEvent.incident_id.in_(ids))
        .group_by(FaultEvent.incident_id)
    ):
        spread[str(incident_id)] = (int(gpus), int(nodes))
    for r in rows:
        gpus, nodes = spread.get(r.incident_id, (1, 1))
        out[r.incident_id] = AppContext(count=nodes, workloads=[r.component_id or ""],
                                        fault_gpus={r.component_id or "": gpus}, clean_gpus={})
    return out


def driver_versions(s: Session, rows: list[Incident]) -> dict[str, str]:
    """The driver version of each incident's node at its last fault (the newest inventory before it)."""
    out: dict[str, str] = {}
    for r in rows:
        if r.component in ("workload", "fleet"):
            continue
        payload = s.scalars(sa.select(NodeState.payload).where(
            NodeState.node == r.node, NodeState.kind == "inventory", NodeState.valid_from <= r.last_seen,
        ).order_by(NodeState.valid_from.desc()).limit(1)).first()
        version = payload.get("driver_version") if isinstance(payload, dict) else None
        if isinstance(version, str) and version:
            out[r.incident_id] = version
    return out


def application_contexts(s: Session, rows: list[Incident], window_s: float) -> dict[str, AppContext]:
    """Workloads of each application incident's GPU and where else they faulted or ran clean, within
    the classification window that ends at the incident's last fault, in three queries."""
    if not rows:
        return {}
    until: dict[tuple[str, str], datetime] = {}
    for r in rows:
        pair = (r.node, r.gpu)
        until[pair] = max(until.get(pair, r.last_seen), r.last_seen)
    by_pair = gpu_contexts(s, until, window_s)
    return {r.incident_id: by_pair[(r.node, r.gpu)] for r in rows}


def gpu_contexts(s: Session, until: dict[tuple[str, str], datetime],
                 window_s: float) -> dict[tuple[str, str], AppContext]:
    """For each (node, GPU): the workloads whose application faults it saw within the window that ends
    at its time in `until`, and where else they faulted or ran clean within that window. Only the
    window's faults count, not those read after them, so the context is the same whichever batch asks."""
    w = timedelta(seconds=window_s)
    pairs = sorted(until)
    since, last = min(until.values()) - w, max(until.values())
    here: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for node, gpu, workload, at in s.execute(
        sa.select(FaultEvent.node, FaultEvent.gpu, FaultEvent.workload, FaultEvent.occurred_at).where(
            FaultEvent.family == "application", FaultEvent.occurred_at >= since, FaultEvent.occurred_at <= last,
            sa.tuple_(FaultEvent.node, FaultEvent.gpu).in_(pairs), FaultEvent.counted.is_not(False),
            FaultEvent.sympathetic.is_not(True),
        )
    ):
        end = until[(node, gpu)]
        if end - w <= at <= end:
            counts = here[(node, gpu)]
            counts[workload or ""] = counts.get(workload or "", 0) + 1
    workloads = sorted({w_ for counts in here.values() for w_ in counts if w_})
    faulted: dict[str, list[tuple[tuple[str, str], datetime]]] = defaultdict(list)
    assigned: dict[str, list[tuple[tuple[str, str], datetime]]] = defaultdict(list)
    if workloads:
        for workload, node, gpu_uuid, gpu, at in s.execute(
            sa.select(FaultEvent.workload, FaultEvent.node, FaultEvent.gpu_uuid, FaultEvent.gpu,
                      FaultEvent.occurred_at).where(
                FaultEvent.workload.in_(workloads), FaultEvent.family == "application",
                FaultEvent.occurred_at >= since, FaultEvent.occurred_at <= last,
                FaultEvent.sympathetic.is_not(True),
            )
        ):
            if workload:
                faulted[workload].append(((node, gpu_uuid or gpu), at))
        for workload, node, gpu, at in s.execute(
            sa.select(GpuAssignment.workload, GpuAssignment.node, GpuAssignment.gpu, GpuAssignment.seen_at).where(
                GpuAssignment.workload.in_(workloads), GpuAssignment.seen_at >= since, GpuAssignment.seen_at <= last,
            )
        ):
            assigned[workload].append(((node, gpu), at))
    out: dict[tuple[str, str], AppContext] = {}
    for pair in pairs:
        end = until[pair]
        counts = here.get(pair, {})
        ws = sorted(w_ for w_ in counts if w_)
        fault_gpus = {w_: {g for g, at in faulted[w_] if end - w <= at <= end} for w_ in ws}
        ran = {w_: {g for g, at in assigned[w_] if end - w <= at <= end} for w_ in ws}
        out[pair] = AppContext(
            count=sum(counts.values()), workloads=ws,
            fault_gpus={w_: len(fault_gpus[w_]) for w_ in ws},
            clean_gpus={w_: len(ran[w_] - fault_gpus[w_]) for w_ in ws},
        )
    return out
