"""What classification needs from SQL: what the workloads of an incident did elsewhere.

For application-class incidents the workloads that faulted on the GPU within `classify_window_s`
(a sympathetic report of a hardware fault is no fault of its workload's: `models.sympathetic`),
the GPUs where they faulted, and the GPUs where they ran clean (`models.grouping.AppContext`); for a
workload's incident its GPUs and nodes; each incident's driver version. The verdict itself is the
engine's (`models.grouping.incident_verdict`).
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
    """Workloads of each application incident's GPU and where else they faulted or ran clean,
    within the classification window (from the earliest incident of the batch), in three queries."""
    if not rows:
        return {}
    by_pair = gpu_contexts(s, {(r.node, r.gpu) for r in rows}, min(r.last_seen for r in rows), window_s)
    return {r.incident_id: by_pair[(r.node, r.gpu)] for r in rows}


def gpu_contexts(s: Session, gpus: set[tuple[str, str]], until: datetime,
                 window_s: float) -> dict[tuple[str, str], AppContext]:
    """For each (node, GPU): the workloads whose application faults it saw within the window, and
    where else they faulted or ran clean."""
    since = until - timedelta(seconds=window_s)
    pairs = sorted(gpus)
    here: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for node, gpu, workload, n in s.execute(
        sa.select(FaultEvent.node, FaultEvent.gpu, FaultEvent.workload, sa.func.count()).where(
            FaultEvent.family == "application", FaultEvent.occurred_at >= since,
            sa.tuple_(FaultEvent.node, FaultEvent.gpu).in_(pairs), FaultEvent.counted.is_not(False),
            FaultEvent.sympathetic.is_not(True),
        ).group_by(FaultEvent.node, FaultEvent.gpu, FaultEvent.workload)
    ):
        here[(node, gpu)][workload or ""] = int(n)
    workloads = sorted({w for counts in here.values() for w in counts if w})
    fault_gpus: dict[str, set[tuple[str, str]]] = defaultdict(set)
    ran: dict[str, set[tuple[str, str]]] = defaultdict(set)
    if workloads:
        for w, node, gpu_uuid, gpu in s.execute(
            sa.select(FaultEvent.workload, FaultEvent.node, FaultEvent.gpu_uuid, FaultEvent.gpu).distinct().where(
                FaultEvent.workload.in_(workloads), FaultEvent.family == "application",
                FaultEvent.occurred_at >= since, FaultEvent.sympathetic.is_not(True),
            )
        ):
            if w:
                fault_gpus[w].add((node, gpu_uuid or gpu))
        for w, node, gpu in s.execute(
            sa.select(GpuAssignment.workload, GpuAssignment.node, GpuAssignment.gpu).distinct().where(
                GpuAssignment.workload.in_(workloads), GpuAssignment.seen_at >= since,
            )
        ):
            ran[w].add((node, gpu))
    out: dict[tuple[str, str], AppContext] = {}
    for pair in pairs:
        counts = here.get(pair, {})
        ws = sorted(w for w in counts if w)
        out[pair] = AppContext(
            count=sum(counts.values()), workloads=ws,
            fault_gpus={w: len(fault_gpus[w]) for w in ws},
            clean_gpus={w: len(ran[w] - fault_gpus[w]) for w in ws},
        )
    return out
