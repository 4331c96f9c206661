"""Read the incident history the stream pipeline writes (SQLite by default, PostgreSQL in production)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from models.tables import FaultEvent, Incident

SortKey = Literal["first_seen", "last_seen", "count"]
HARDWARE_CATEGORIES = ("hardware", "suspected_hardware", "interconnect")


@dataclass(frozen=True, slots=True)
class IncidentFilter:
    node: str | None = None
    gpu: str | None = None  # serial, UUID or PCI address
    xid: int | None = None
    category: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    namespace: str | None = None
    owner: str | None = None


def _where(f: IncidentFilter) -> list[Any]:
    conds: list[Any] = []
    if f.node:
        conds.append(Incident.node == f.node)
    if f.gpu:
        conds.append(sa.or_(Incident.serial == f.gpu, Incident.gpu_uuid == f.gpu, Incident.pci == f.gpu.lower(),
                            Incident.gpu == f.gpu))
    if f.category:
        conds.append(Incident.category == f.category)
    if f.status:
        conds.append(Incident.status == f.status)
    if f.since:
        conds.append(Incident.last_seen >= f.since)
    if f.until:
        conds.append(Incident.first_seen < f.until)
    events = sa.select(FaultEvent.incident_id).where(FaultEvent.incident_id.is_not(None))
    if f.xid is not None:
        conds.append(Incident.incident_id.in_(events.where(FaultEvent.xid == f.xid)))
    if f.namespace:
        conds.append(Incident.incident_id.in_(events.where(FaultEvent.namespace == f.namespace)))
    if f.owner:
        conds.append(Incident.incident_id.in_(events.where(FaultEvent.workload.like(f"%{f.owner}%"))))
    return conds


def list_incidents(s: Session, f: IncidentFilter, *, sort: SortKey = "last_seen", limit: int = 50,
                   offset: int = 0) -> tuple[list[Incident], int]:
    """One page of incidents (newest first by `sort`), and how many match in all."""
    conds = _where(f)
    total = s.scalar(sa.select(sa.func.count()).select_from(Incident).where(*conds)) or 0
    order = {"first_seen": Incident.first_seen, "last_seen": Incident.last_seen, "count": Incident.count}[sort]
    rows = list(s.scalars(sa.select(Incident).where(*conds).order_by(order.desc(), Incident.incident_id)
                          .limit(limit).offset(offset)))
    return rows, total


def find_incident(s: Session, ident: str) -> Incident | None:
    """By incident id, or by a unique prefix of it or of its fingerprint."""
    row = s.get(Incident, ident)
    if row is not None:
        return row
    matches = list(s.scalars(sa.select(Incident).where(
        sa.or_(Incident.incident_id.startswith(ident), Incident.fingerprint.startswith(ident)))
        .order_by(Incident.opened_at.desc()).limit(2)))
    return matches[0] if len(matches) == 1 else None


def timeline(s: Session, incident_id: str, limit: int = 200) -> list[FaultEvent]:
    return list(s.scalars(sa.select(FaultEvent).where(FaultEvent.incident_id == incident_id)
                          .order_by(FaultEvent.occurred_at).limit(limit)))


def stats(s: Session, since: datetime | None = None, top: int = 10) -> dict[str, Any]:
    """Counts by code, category, node, GPU model and namespace; the GPUs and nodes with the most
    hardware incidents; mean time between faults per GPU."""
    inc_q = sa.select(Incident)
    ev_q = sa.select(FaultEvent.code, FaultEvent.namespace, FaultEvent.occurred_at, FaultEvent.gpu,
                     FaultEvent.node, FaultEvent.serial)
    if since is not None:
        inc_q = inc_q.where(Incident.last_seen >= since)
        ev_q = ev_q.where(FaultEvent.occurred_at >= since)
    incidents = list(s.scalars(inc_q))
    events = list(s.execute(ev_q))
    hw = [i for i in incidents if i.category in HARDWARE_CATEGORIES]
    per_gpu: dict[str, list[datetime]] = {}
    for e in events:
        per_gpu.setdefault(f"{e.node}/{e.serial or e.gpu}", []).append(e.occurred_at)
    gaps: list[float] = []
    for times in per_gpu.values():
        times.sort()
        gaps += [(b - a).total_seconds() for a, b in pairwise(times) if b > a]
    return {
        "since": since.isoformat() if since else None,
        "incidents": len(incidents),
        "fault_events": len(events),
        "by_code": dict(Counter(e.code for e in events).most_common()),
        "by_category": dict(Counter(i.category for i in incidents).most_common()),
        "by_node": dict(Counter(i.node for i in incidents).most_common(top)),
        "by_namespace": dict(Counter(e.namespace for e in events if e.namespace).most_common(top)),
        "hardware_incidents_by_gpu": dict(Counter(i.serial or i.gpu_uuid or f"{i.node}/{i.gpu}"
                                                  for i in hw).most_common(top)),
        "hardware_incidents_by_node": dict(Counter(i.node for i in hw).most_common(top)),
        "mean_time_between_faults_s": round(sum(gaps) / len(gaps), 1) if gaps else None,
    }
