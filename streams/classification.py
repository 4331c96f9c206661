"""Classification in context: the verdict on an incident, with what its workloads did elsewhere.

For application-class incidents the workloads that faulted on the GPU within `classify_window_s`,
the GPUs where they faulted, and the GPUs where they ran clean are read here; the rule itself is
`models.incidents.classify_in_context`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import FaultEvent, GpuAssignment, Incident
from models.classify import Verdict
from models.incidents import ClassifyContext, FaultObservation, classify_in_context
from models.stream_policy import PipelinePolicy


@dataclass(frozen=True, slots=True)
class AppContext:
    count: int
    workloads: list[str]
    fault_gpus: dict[str, int]
    clean_gpus: dict[str, int]


def verdict(row: Incident, observations: list[FaultObservation], app: AppContext | None,
            policy: PipelinePolicy) -> Verdict:
    cats = [o.category for o in observations if o.category]
    severity = next((str(o.details["severity"]) for o in reversed(observations) if "severity" in o.details), None)
    recovery = next((str(o.details["recovery_action_new"]) for o in reversed(observations)
                     if "recovery_action_new" in o.details), None)
    gpu_label = row.gpu_uuid or (f"GPU {row.pci}" if row.pci else "the node")
    if row.family != "application" or app is None:
        return classify_in_context(ClassifyContext(
            gpu=gpu_label, family=row.family, codes=row.codes, categories=cats, count=row.count,
            workloads=list(row.workloads), workload_fault_gpus={}, severity=severity, recovery_action=recovery,
        ), policy)
    return classify_in_context(ClassifyContext(
        gpu=gpu_label, family=row.family, codes=row.codes, categories=cats, count=max(app.count, row.count),
        workloads=app.workloads, workload_fault_gpus=app.fault_gpus, workload_clean_gpus=app.clean_gpus,
    ), policy)


def application_contexts(s: Session, rows: list[Incident], window_s: float) -> dict[str, AppContext]:
    """Workloads of each application incident's GPU and where else they faulted or ran clean,
    within the classification window (from the earliest incident of the batch), in three queries."""
    if not rows:
        return {}
    since = min(r.last_seen for r in rows) - timedelta(seconds=window_s)
    pairs = sorted({(r.node, r.gpu) for r in rows})
    here: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for node, gpu, workload, n in s.execute(
        sa.select(FaultEvent.node, FaultEvent.gpu, FaultEvent.workload, sa.func.count()).where(
            FaultEvent.family == "application", FaultEvent.occurred_at >= since,
            sa.tuple_(FaultEvent.node, FaultEvent.gpu).in_(pairs),
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
                FaultEvent.occurred_at >= since,
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
    out: dict[str, AppContext] = {}
    for r in rows:
        counts = here.get((r.node, r.gpu), {})
        ws = sorted(w for w in counts if w)
        out[r.incident_id] = AppContext(
            count=sum(counts.values()), workloads=ws,
            fault_gpus={w: len(fault_gpus[w]) for w in ws},
            clean_gpus={w: len(ran[w] - fault_gpus[w]) for w in ws},
        )
    return out
