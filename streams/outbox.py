"""The outbox: messages to publish, written in the transaction that decided them, marked sent after.

Incident changes go to the incidents stream keyed by node (a fleet incident's node is its
cluster), and action requests to the actions stream. Each row has an idempotency key: a message already in the
outbox (an action already requested) is not written again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import incident_to_dict
from history.tables import Incident, OutboxMessage
from models.actions import ActionRequest, action_to_dict


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Outgoing:
    outbox_id: int
    stream: str  # "incidents" or "actions"
    key: str
    payload: dict[str, Any]


def incident_message(row: Incident, change: str, reason: str) -> OutboxMessage:
    return OutboxMessage(
        idempotency_key=f"incident:{row.incident_id}:v{row.version}:{change}", stream="incidents", key=row.node,
        payload={"type": "incident", "change": change, "reason": reason, "incident": incident_to_dict(row)},
        created_at=utcnow(), sent_at=None,
    )


def action_message(a: ActionRequest, row: Incident) -> OutboxMessage:
    body = action_to_dict(a)
    body.update({"family": row.family, "category": row.category, "gpu_uuid": row.gpu_uuid, "serial": row.serial,
                 "pci": row.pci, "count": row.count, "pods": list(row.pods or []),
                 "immediate_action": row.immediate_action})
    return OutboxMessage(idempotency_key=a.idempotency_key, stream="actions", key=row.node, payload=body,
                         created_at=utcnow(), sent_at=None)


def insert_outbox(s: Session, rows: list[OutboxMessage]) -> list[OutboxMessage]:
    """Add the rows whose idempotency key is new (an action already requested is not requested again)."""
    if not rows:
        return []
    keys = [r.idempotency_key for r in rows]
    with s.no_autoflush:
        have = set(s.scalars(sa.select(OutboxMessage.idempotency_key)
                             .where(OutboxMessage.idempotency_key.in_(keys))))
    out: list[OutboxMessage] = []
    for r in rows:
        if r.idempotency_key in have:
            continue
        have.add(r.idempotency_key)
        s.add(r)
        out.append(r)
    s.flush()
    return out


def outgoing(o: OutboxMessage) -> Outgoing:
    return Outgoing(o.id, o.stream, o.key, o.payload)


def sent_update(ids: Sequence[int]) -> sa.Update:
    """The UPDATE that marks the outbox rows `ids` sent, now."""
    return sa.update(OutboxMessage).where(OutboxMessage.id.in_(list(ids))).values(sent_at=utcnow())


def unsent(engine: sa.Engine, older_than_s: float, limit: int = 1000) -> list[Outgoing]:
    """Outbox rows not marked sent `older_than_s` seconds after they were written, oldest first."""
    before = utcnow() - timedelta(seconds=older_than_s)
    with Session(engine) as s:
        rows = s.scalars(sa.select(OutboxMessage).where(OutboxMessage.sent_at.is_(None),
                                                          OutboxMessage.created_at <= before)
                         .order_by(OutboxMessage.id).limit(limit)).all()
        return [outgoing(o) for o in rows]


def prune_sent(engine: sa.Engine, keep_s: float, limit: int = 10_000) -> int:
    """Delete up to `limit` outbox rows sent more than `keep_s` seconds ago, oldest first; returns how many.

    A row's idempotency key goes with it: a message decided again after that would be written and
    published again, so `keep_s` must outlast any redelivery of the records that decided it."""
    before = utcnow() - timedelta(seconds=keep_s)
    oldest = (sa.select(OutboxMessage.id).where(OutboxMessage.sent_at.is_not(None), OutboxMessage.sent_at < before)
              .order_by(OutboxMessage.sent_at, OutboxMessage.id).limit(limit))
    with Session(engine) as s, s.begin():
        ids = list(s.scalars(oldest))
        if ids:
            s.execute(sa.delete(OutboxMessage).where(OutboxMessage.id.in_(ids)))
        return len(ids)


def mark_sent(engine: sa.Engine, ids: Iterable[int]) -> None:
    ids = list(ids)
    if not ids:
        return
    with Session(engine) as s, s.begin():
        s.execute(sent_update(ids))
