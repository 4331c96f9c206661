"""Pending cordons: the incidents whose cordon the responder must offer again (table `pending_cordons`,
`history.action_tables`, migration 0006).

A row is a retryable failure (`kind="retry"`, tried again from `due_at`, `attempts` so far) or a
cordon held by the tripped circuit breaker (`kind="breaker"`, offered again once it is reset). What
to write is decided by `models.cordon_retry.cordon_followup`; this store only keeps it. Writes are
upserts keyed by incident, so two responders settling the same incident leave one row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from history.action_tables import pending_cordons_table as table
from models.cordon_retry import CordonFollowup


@dataclass(frozen=True, slots=True)
class PendingCordon:
    incident_id: str
    node: str
    kind: str  # retry | breaker
    attempts: int
    due_at: datetime
    reason: str


class PendingCordons:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def get(self, incident_id: str) -> PendingCordon | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(table).where(table.c.incident_id == incident_id)).mappings().first()
        return None if row is None else _pending(row)

    def settle(self, incident_id: str, node: str, followup: CordonFollowup, now: datetime | None = None) -> None:
        """Keep the follow-up of an attempt: a retry or a breaker hold is (re)written, anything else
        removes the incident's row."""
        if followup.kind == "settled":
            with self.engine.begin() as conn:
                conn.execute(table.delete().where(table.c.incident_id == incident_id))
            return
        at = now or datetime.now(UTC)
        values = {"node": node, "kind": followup.kind, "attempts": followup.attempts,
                  "due_at": followup.due_at or at, "reason": followup.reason[:2000], "updated_at": at}
        for _ in range(2):
            try:
                with self.engine.begin() as conn:
                    done = conn.execute(table.update().where(table.c.incident_id == incident_id).values(**values))
                    if done.rowcount == 0:
                        conn.execute(table.insert().values(incident_id=incident_id, **values))
                return
            except IntegrityError:  # another responder inserted it first: update that row
                continue

    def due(self, now: datetime, limit: int = 100) -> list[PendingCordon]:
        """Retries whose time has come, oldest first."""
        q = sa.select(table).where(table.c.kind == "retry", table.c.due_at <= now).order_by(table.c.due_at)
        with self.engine.connect() as conn:
            return [_pending(r) for r in conn.execute(q.limit(limit)).mappings()]

    def held(self, limit: int = 1000) -> list[PendingCordon]:
        """Cordons held by the breaker, in the order they were held."""
        q = sa.select(table).where(table.c.kind == "breaker").order_by(table.c.due_at).limit(limit)
        with self.engine.connect() as conn:
            return [_pending(r) for r in conn.execute(q).mappings()]

    def all(self) -> list[PendingCordon]:
        with self.engine.connect() as conn:
            return [_pending(r) for r in conn.execute(sa.select(table).order_by(table.c.due_at)).mappings()]


def _pending(row: sa.RowMapping) -> PendingCordon:
    return PendingCordon(incident_id=row["incident_id"], node=row["node"], kind=row["kind"],
                         attempts=row["attempts"], due_at=row["due_at"], reason=row["reason"])
