"""Lifecycle transitions of incidents in SQL (the rules are `models.lifecycle`).

Nothing here commits: the caller owns the transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import Incident, IncidentTransition
from models.lifecycle import ENDS_STREAM_INCIDENT, Actor, check_transition


class TransitionError(ValueError):
    """A lifecycle step the rules do not allow; the message says which steps are."""


def _now() -> datetime:
    return datetime.now(UTC)


def transition_to_dict(t: IncidentTransition) -> dict[str, Any]:
    return {"incident_id": t.incident_id, "from": t.from_state, "to": t.to_state, "at": t.at.isoformat(),
            "actor": t.actor, "reason": t.reason}


def incident_transitions(s: Session, incident_id: str) -> list[dict[str, Any]]:
    """The incident's lifecycle steps, oldest first."""
    rows = s.scalars(sa.select(IncidentTransition).where(IncidentTransition.incident_id == incident_id)
                     .order_by(IncidentTransition.at, IncidentTransition.id))
    return [transition_to_dict(t) for t in rows]


def apply_transition(s: Session, row: Incident, to: str, *, actor: str, reason: str, at: datetime | None = None,
                     by: Actor = "person") -> dict[str, Any]:
    """Move `row` to `to` (raises `TransitionError` when the rules forbid it) and record the step.

    A person's step ends the incident for the stream too: an open incident becomes `resolved`, so
    the next fault of its GPU and family opens a new incident linked to it."""
    verdict = check_transition(row.lifecycle, to, by)
    if not verdict.allowed:
        raise TransitionError(f"incident {row.incident_id}: {verdict.reason}")
    at = at or _now()
    t = IncidentTransition(incident_id=row.incident_id, from_state=row.lifecycle, to_state=to, at=at,
                           actor=actor, reason=reason)
    s.add(t)
    row.lifecycle = to
    # `updated_at` (the stream's last activity, which its quiet period counts from) and `version`
    # (its message keys) stay the stream's own.
    if to in ENDS_STREAM_INCIDENT and row.status == "open":
        row.status, row.resolved_at = "resolved", at
    s.flush()
    return transition_to_dict(t)


def record_responder_step(s: Session, incident_id: str, to: str, *, reason: str, actor: str = "xidpipe-respond",
                          at: datetime | None = None) -> dict[str, Any] | None:
    """A responder's step (`mitigated`, `ticketed`, and the remediation loop's `repaired` and `rma`):
    recorded once; None when the incident is unknown or at (or past) that step already, so a
    redelivered request changes nothing."""
    row = s.get(Incident, incident_id, with_for_update=s.get_bind().dialect.name == "postgresql")
    if row is None:
        return None
    verdict = check_transition(row.lifecycle, to, "responder")
    if not verdict.allowed:
        return None
    return apply_transition(s, row, to, actor=actor, reason=reason, at=at, by="responder")
