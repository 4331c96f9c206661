"""Incident rows as the pure code and the messages see them: their state, their listed values, a dict."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from history.tables import Incident
from models.incidents import IncidentState

MAX_LISTED = 20  # pods, processes, workloads listed on one incident


def add_listed(row: Incident, attr: str, value: str | None) -> None:
    """Add `value` to the row's list `attr` (pods, processes, workloads) unless present or full."""
    if not value:
        return
    current: list[Any] = list(getattr(row, attr) or [])
    if value not in current and len(current) < MAX_LISTED:
        setattr(row, attr, [*current, value])


def incident_state(row: Incident) -> IncidentState:
    """The incident row as the grouping and action rules of `models.incidents` take it."""
    return IncidentState(
        incident_id=row.incident_id, fingerprint=row.fingerprint, node=row.node, gpu=row.gpu, family=row.family,
        status="open" if row.status == "open" else "resolved", count=row.count, first_seen=row.first_seen,
        last_seen=row.last_seen, category=row.category, reason=row.reason, codes=tuple(row.codes or ()),
        previous_incident_id=row.previous_incident_id, resolved_at=row.resolved_at,
        cordon_requested=row.cordon_requested, component=row.component or "gpu", component_id=row.component_id,
        occurrence_at=row.occurrence_at, occurrence_signals=tuple(row.occurrence_signals or ()),
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
