"""Incident rows as the pure code and the messages see them: their state, their listed values, a dict
(one, or every incident of a run); and the lock a transaction takes on the open incidents it may change."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import Incident
from models.incidents import IncidentState

MAX_LISTED = 20  # pods, processes, workloads, affected workloads listed on one incident


def add_listed(row: Incident, attr: str, value: str | None) -> None:
    """Add `value` to the row's list `attr` (pods, processes, workloads, affected) unless present or full."""
    if not value:
        return
    current: list[Any] = list(getattr(row, attr) or [])
    if value not in current and len(current) < MAX_LISTED:
        setattr(row, attr, [*current, value])


def lock_open(s: Session, fingerprints: Iterable[str], gpus_of: Iterable[str] = ()) -> list[Incident]:
    """The open incidents of `fingerprints`, and the open GPU incidents of the nodes `gpus_of`, read
    fresh and locked (SELECT ... FOR UPDATE) until the transaction ends.

    Workers of one group change the same incident at once (a workload's faults read from several
    partitions, a fleet incident): each reads the row, adds its faults and writes it back, and under
    READ COMMITTED the later write would drop the earlier one's. Locked first, the row is read only
    once the other transaction committed. Rows are locked in fingerprint order, so two transactions
    locking overlapping sets never wait for each other in a cycle. (SQLite: no row locks; it has one
    writer at a time.)"""
    wanted, nodes = sorted(set(fingerprints)), sorted(set(gpus_of))
    if not wanted and not nodes:
        return []
    which = sa.or_(Incident.fingerprint.in_(wanted), sa.and_(Incident.node.in_(nodes), Incident.component == "gpu"))
    return list(s.scalars(sa.select(Incident).where(Incident.status == "open", which)
                          .order_by(Incident.fingerprint).with_for_update()
                          .execution_options(populate_existing=True)))


def lock_conflict(exc: BaseException) -> bool:
    """Whether a database error ended the transaction over locks (a deadlock, or a transaction that
    could not be serialized): running it again succeeds."""
    return getattr(getattr(exc, "orig", None), "sqlstate", None) in _LOCK_CONFLICTS


_LOCK_CONFLICTS = ("40P01", "40001")  # PostgreSQL: deadlock_detected, serialization_failure


def incident_state(row: Incident) -> IncidentState:
    """The incident row as the grouping and action rules of `models.incidents` take it."""
    return IncidentState(
        incident_id=row.incident_id, fingerprint=row.fingerprint, node=row.node, gpu=row.gpu, family=row.family,
        status="open" if row.status == "open" else "resolved", count=row.count, first_seen=row.first_seen,
        last_seen=row.last_seen, category=row.category, reason=row.reason, codes=tuple(row.codes or ()),
        previous_incident_id=row.previous_incident_id, resolved_at=row.resolved_at,
        cordon_requested=row.cordon_requested, component=row.component or "gpu", component_id=row.component_id,
        occurrence_at=row.occurrence_at, occurrence_signals=tuple(row.occurrence_signals or ()),
        gpu_uuid=row.gpu_uuid, occurrence_pids=tuple(int(p) for p in row.occurrence_pids or ()),
        recovery_action=row.recovery_action,
    )


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def row_dict(row: Any) -> dict[str, Any]:
    """A table row's columns by name, times in ISO 8601."""
    out: dict[str, Any] = {}
    for col in row.__table__.columns:
        value = getattr(row, col.key)
        out[col.key] = iso(value) if isinstance(value, datetime) else value
    return out


def incident_to_dict(row: Incident) -> dict[str, Any]:
    return row_dict(row)


def all_incidents(engine: sa.Engine) -> list[dict[str, Any]]:
    """Every incident of the database as a dict (`incident_to_dict`), in the order they opened: what
    the demo, `xidpipe replay` and `streams.runner.run_pipeline_once` report of a run of their own."""
    with Session(engine) as s:
        rows = s.scalars(sa.select(Incident).order_by(Incident.opened_at, Incident.incident_id))
        return [incident_to_dict(r) for r in rows]
