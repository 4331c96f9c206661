"""Fleet incidents in SQL: incident rows of component `fleet` (`models.fleet` decides them).

The stream worker writes the fleet incidents of fault bursts (`streams.fleet`), the responder the
one a breaker trip raises (`respond.fleet_alerts`); the dossier and the read side list the nodes a
fleet incident spans and those nodes' own incidents of its family. The fleet count reads a family's
faults over a span of event time (`fleet_faults`), one transaction per family at a time
(`lock_fleet_counts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import FaultEvent, Incident
from models.fleet import BREAKER, FLEET, FleetFault, breaker_incident, fleet_fingerprint
from models.incidents import IncidentState

MEMBERS_LIMIT = 200  # per-node incidents listed on one fleet incident


def new_fleet_row(state: IncidentState, nodes: Sequence[str], now: datetime, component_id: str) -> Incident:
    """The row of a fleet incident that `models.fleet` opened."""
    return Incident(
        incident_id=state.incident_id, fingerprint=state.fingerprint, node=state.node, gpu=FLEET,
        family=state.family, status="open", lifecycle="open", category=FLEET, reason=state.reason,
        count=state.count, first_seen=state.first_seen, last_seen=state.last_seen, opened_at=now, updated_at=now,
        resolved_at=None, previous_incident_id=state.previous_incident_id, gpu_uuid=None, serial=None, pci=None,
        codes=list(state.codes), pods=[], processes=[], workloads=[], cordon_requested=False, version=1,
        component=FLEET, component_id=component_id, nodes=sorted(set(nodes)),
    )


def latest_fleet(s: Session, cluster: str, component_id: str) -> Incident | None:
    """The cluster's latest fleet incident of `component_id` (a fault family, or `breaker`)."""
    fp = fleet_fingerprint(cluster, component_id)
    with s.no_autoflush:
        return s.scalars(sa.select(Incident).where(Incident.fingerprint == fp)
                         .order_by(Incident.opened_at.desc(), Incident.incident_id.desc()).limit(1)).first()


def fleet_incidents_from(s: Session, cluster: str, component_id: str, since: datetime) -> list[Incident]:
    """The cluster's fleet incidents of `component_id` whose last fault is at `since` or later, and the
    latest one before them (in event time), oldest first."""
    fp = fleet_fingerprint(cluster, component_id)
    with s.no_autoflush:
        rows = list(s.scalars(sa.select(Incident).where(Incident.fingerprint == fp, Incident.last_seen >= since)
                              .order_by(Incident.first_seen, Incident.incident_id)))
        before = s.scalars(sa.select(Incident).where(Incident.fingerprint == fp, Incident.last_seen < since)
                           .order_by(Incident.last_seen.desc(), Incident.incident_id.desc()).limit(1)).first()
    return [before, *rows] if before is not None else rows


def lock_fleet_counts(s: Session, fingerprints: Sequence[str]) -> None:
    """Count one family's fleet window in one transaction at a time, until it ends (PostgreSQL: an
    advisory transaction lock per fleet fingerprint, taken in order; SQLite has one writer at a time).

    Two workers that each store faults of a family on too few nodes, and count before either has
    committed, would each miss the other's faults, and the burst would make no incident. Locked, the
    later count starts once the earlier transaction committed, and reads its faults and its incident."""
    if s.get_bind().dialect.name != "postgresql":
        return
    for fp in sorted(set(fingerprints)):
        key = int(fp.rpartition(":")[2], 16) % 2**64
        s.execute(sa.select(sa.func.pg_advisory_xact_lock(key - 2**64 if key >= 2**63 else key)))


def fleet_faults(s: Session, family: str, spans: Sequence[tuple[datetime, datetime]]) -> list[FleetFault]:
    """The faults of `family` whose event time falls in any of `spans` (each from, to: inclusive), one
    per node, code and time (on the `fault_events (family, occurred_at)` index)."""
    if not spans:
        return []
    rows = s.execute(sa.select(FaultEvent.node, FaultEvent.code, FaultEvent.occurred_at).distinct()
                     .where(FaultEvent.family == family,
                            sa.or_(*(FaultEvent.occurred_at.between(lo, hi) for lo, hi in spans)))).all()
    return [FleetFault(node, code, at) for node, code, at in rows]


def record_breaker_trip(s: Session, *, cluster: str, at: datetime, pool: str, reason: str, family: str,
                        node: str, incident_id: str, cordoned: Sequence[str], now: datetime) -> tuple[Incident, bool]:
    """Write the fleet incident of the breaker trip at `at`; returns it, and False when it was written
    already (a redelivered trip). The incident that was held and the incidents of `cordoned` nodes lend it their
    codes; an earlier breaker incident still open is resolved by the new trip. Flushes, never commits."""
    latest = latest_fleet(s, cluster, BREAKER)
    held = s.get(Incident, incident_id)
    codes = [str(c) for c in (held.codes or [])] if held is not None else []
    state = breaker_incident(cluster=cluster, at=at, pool=pool, reason=reason, family=family,
                             nodes=[*cordoned, node], codes=codes,
                             previous=latest.incident_id if latest is not None else None)
    known = s.get(Incident, state.incident_id)
    if known is not None:
        return known, False
    if latest is not None and latest.status == "open":
        latest.status, latest.resolved_at, latest.updated_at = "resolved", at, now
        latest.version += 1
        s.flush()  # one open incident per fingerprint
    row = new_fleet_row(state, [*cordoned, node], now, BREAKER)
    s.add(row)
    s.flush()
    return row, True


def member_incidents(s: Session, row: Incident) -> list[Incident]:
    """The per-node incidents a fleet incident gathers: for a burst, the incidents of its family on
    its nodes seen during it; for a breaker trip, the incidents of its nodes seen in the hour before."""
    nodes = [str(n) for n in row.nodes or []]
    if not nodes:
        return []
    since = row.first_seen - (timedelta(hours=1) if row.component_id == BREAKER else timedelta(0))
    q = sa.select(Incident).where(Incident.node.in_(nodes), Incident.component != FLEET,
                                  Incident.last_seen >= since, Incident.first_seen <= row.last_seen)
    if row.component_id != BREAKER:
        q = q.where(Incident.family == row.family)
    return list(s.scalars(q.order_by(Incident.node, Incident.first_seen).limit(MEMBERS_LIMIT)))
