"""One fault, two reports: a kernel Xid line and the NVML Xid event of the same GPU become one event.

Whichever report comes first is stored; the other, within `duplicate_window_s`, is merged into it,
and the kernel line's text, pid and process are kept.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import add_listed
from history.tables import FaultEvent, Incident
from models.correlate import Attribution
from models.grouping import same_fault
from models.incidents import FaultObservation

log = logging.getLogger(__name__)

# (node, GPU UUID, Xid, source) of a report waiting for its partner.
PartnerKey = tuple[str, str | None, int | None, str]


def other_source(source: str) -> str:
    return "nvml" if source == "kernel" else "kernel"


def partner_candidates(s: Session, attributed: list[tuple[FaultObservation, Attribution]],
                       window_s: float) -> dict[PartnerKey, list[Any]]:
    """Unmerged single-source events that a fault of this batch may pair with, by (node, GPU, Xid, source)."""
    wanted: set[PartnerKey] = set()
    times: list[datetime] = []
    for obs, attr in attributed:
        if obs.xid is not None and attr.gpu.uuid:
            wanted.add((obs.node, attr.gpu.uuid, obs.xid, other_source(obs.source)))
            times.append(obs.occurred_at)
    out: dict[PartnerKey, list[Any]] = {}
    if not wanted:
        return out
    w = timedelta(seconds=window_s)
    for row in s.scalars(
        sa.select(FaultEvent).where(
            FaultEvent.node.in_({k[0] for k in wanted}), FaultEvent.gpu_uuid.in_({k[1] for k in wanted}),
            FaultEvent.xid.in_({k[2] for k in wanted}), FaultEvent.sources.in_({k[3] for k in wanted}),
            FaultEvent.occurred_at >= min(times) - w, FaultEvent.occurred_at <= max(times) + w,
        ).order_by(FaultEvent.occurred_at)
    ):
        key = (row.node, row.gpu_uuid, row.xid, row.sources)
        if key in wanted:
            out.setdefault(key, []).append(row)
    return out


def merge(s: Session, obs: FaultObservation, attr: Attribution, candidates: list[Any], window_s: float) -> bool:
    """Pair `obs` with the closest candidate report of the other source (removed from the list).

    `candidates`: FaultEvent rows of earlier batches and `EventDraft` rows of this one.
    """
    best: int | None = None
    best_gap = 0.0
    for i, c in enumerate(candidates):
        if not same_fault(obs.source, obs.gpu_uuid or c.gpu_uuid, obs.xid, obs.occurred_at,
                          c.sources, c.gpu_uuid, c.xid, c.occurred_at, window_s):
            continue
        gap = abs((c.occurred_at - obs.occurred_at).total_seconds())
        if best is None or gap < best_gap:
            best, best_gap = i, gap
    if best is None:
        return False
    partner = candidates.pop(best)
    partner.sources = "kernel+nvml"
    partner.partner_hash = obs.content_hash
    if obs.source == "kernel":  # the kernel line is the better evidence: its text, pid and process
        partner.nvml_record_id = partner.record_id
        partner.record_id, partner.raw, partner.message = obs.record_id, obs.raw, obs.message
        partner.pid, partner.process = attr.process.pid, attr.process.process
        if attr.pod.pod or partner.pod is None:
            partner.pod, partner.namespace, partner.container = attr.pod.pod, attr.pod.namespace, attr.pod.container
            partner.workload = attr.workload
        partner.attribution = attr.to_dict()
        inc = s.get(Incident, partner.incident_id) if partner.incident_id else None
        if inc is not None:
            add_listed(inc, "processes", f"{obs.process or '?'}[{obs.pid}]" if obs.pid is not None else None)
            add_listed(inc, "pods", f"{attr.pod.namespace}/{attr.pod.pod}/{attr.pod.container}"
                       if attr.pod.pod else None)
            add_listed(inc, "workloads", attr.workload)
    else:
        partner.nvml_record_id = obs.record_id
    log.debug("kernel and NVML reports of %s on %s merged", obs.code, partner.gpu_uuid,
              extra={"node": obs.node, "gpu": partner.gpu_uuid, "xid": obs.xid})
    return True
