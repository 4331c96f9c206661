"""What was done about an incident: cluster actions, its ticket, chat notifications.

These live in the tables the responder writes (the action record of `history.action_tables`, the
ticket maps and notification logs of `history.sink_tables`, one per sink), in the same database
in the default set-up. A table that does not exist (a database the migrations have not brought to
0004) reads as nothing.
"""

from __future__ import annotations

import weakref
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.action_tables import actions_table
from history.remediation_store import incident_remediation
from history.sink_tables import ChatAlertRow, NotificationLogRow, TicketRow

ACTIONS_LIMIT = 200

# Tables known to exist, per engine (a table that is missing now may be created later).
_present: weakref.WeakKeyDictionary[sa.Engine, set[str]] = weakref.WeakKeyDictionary()


def has_table(s: Session, name: str) -> bool:
    bind = s.get_bind()
    engine = bind if isinstance(bind, sa.Engine) else bind.engine
    known = _present.setdefault(engine, set())
    if name in known:
        return True
    if sa.inspect(s.connection()).has_table(name):
        known.add(name)
        return True
    return False


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return (value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)).isoformat()


def actions(s: Session, incident_id: str, limit: int = ACTIONS_LIMIT) -> list[Any]:
    """The incident's rows of the action record (cordons, repeats, evictions, releases), oldest first."""
    if not has_table(s, "actions"):
        return []
    return list(s.execute(sa.select(actions_table).where(actions_table.c.incident_id == incident_id)
                          .order_by(actions_table.c.at, actions_table.c.id).limit(limit)).all())


def incident_activity(s: Session, incident_id: str) -> dict[str, list[dict[str, Any]]]:
    """{actions, tickets, notifications, remediation} of one incident, each a list of plain dicts with ISO
    times (`remediation`: its remediation loops, `history.remediation_store.loop_dict`)."""
    out: dict[str, list[dict[str, Any]]] = {"actions": [], "tickets": [], "notifications": [], "remediation": []}
    out["remediation"] = incident_remediation(s, incident_id)
    for r in actions(s, incident_id):
        out["actions"].append({"at": _iso(r.at), "action": r.action, "outcome": r.outcome, "node": r.node,
                               "decision": r.decision, "reason": r.reason, "dry_run": bool(r.dry_run),
                               "actor": r.actor})
    if has_table(s, "tickets"):  # one per ticket sink
        for t in s.scalars(sa.select(TicketRow).where(TicketRow.incident_id == incident_id)
                           .order_by(TicketRow.created_at, TicketRow.sink)):
            out["tickets"].append({"key": t.ticket_key, "tracker": t.tracker, "created_at": _iso(t.created_at),
                                   "updated_at": _iso(t.updated_at), "last_comment_at": _iso(t.last_comment_at),
                                   "count": t.count, "attached": list(t.attached or [])})
    if has_table(s, "chat_alerts") and has_table(s, "notification_log"):
        rows = s.execute(sa.select(NotificationLogRow, ChatAlertRow.status).join(
            ChatAlertRow, (ChatAlertRow.sink == NotificationLogRow.sink)
            & (ChatAlertRow.group_key == NotificationLogRow.group_key))
            .where(ChatAlertRow.incident_id == incident_id).order_by(NotificationLogRow.sent_at)).all()
        for n, status in rows:
            out["notifications"].append({"sent_at": _iso(n.sent_at), "channel": n.channel,
                                         "transport": n.transport, "messages": n.messages, "thread_ts": n.thread_ts,
                                         "group_key": n.group_key, "alert_status": status})
    return out
