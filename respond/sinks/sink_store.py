"""SQL state of the sinks: the ticket map and queue, chat alerts, the notification log, silences, and
what each paging sink told about each incident (`pages`).

Tables are defined in `history.sink_tables` and created by the migrations (`history.migrate.upgrade`);
the store never creates them. One short transaction per call; rows come back detached (plain
values), so callers never hold a session across a network call.

Each sink has its own delivery state: a store bound to a sink's name (`SinkStore.for_sink`) reads
and writes that sink's rows only. Silences are shared by every chat sink.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from history.sink_tables import (
    UNATTRIBUTED,
    ChatAlertRow,
    ChatFailureRow,
    NotificationLogRow,
    PageRow,
    SilenceRow,
    TicketJobRow,
    TicketRow,
)
from models.notify import Alert, Matcher, Silence, content_hash
from models.ticket_policy import TicketState

# The tables of each kind of sink, whose rows are keyed by the sink's name.
SINK_TABLES: dict[str, tuple[type[Any], ...]] = {
    "tickets": (TicketRow, TicketJobRow),
    "chat": (ChatAlertRow, NotificationLogRow, ChatFailureRow),
    "pages": (PageRow,),
}
PAGE_DUE_STATES = ("pending", "idle")  # pending: events due or retried; idle: a resend due at next_attempt_at


def _newer(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether snapshot `new` is at least as recent as `old` (a late redelivery must not roll back)."""
    def rank(p: dict[str, Any]) -> tuple[str, int, int, int]:
        d = p.get("dossier", {})
        return (str(d.get("last_seen", "")), int(d.get("count", 0)), int(d.get("status") == "resolved"),
                len(d.get("evidence", [])))
    return rank(new) >= rank(old)


def _due_now(row: PageRow, now: datetime) -> None:
    """A paging row with news: decided again now (a failing one keeps its backoff)."""
    if row.state != "pending" or row.attempts == 0:
        row.next_attempt_at = min(row.next_attempt_at, now) if row.state == "pending" else now
    if row.state == "dead":
        row.attempts = 0
    row.state = "pending"
    row.updated_at = now


class SinkStore:
    """The sinks' state in the database behind `engine` (`history.engine.make_engine`), migrated to
    head; bound to one sink (`sink`) for the tickets, the queue, the alerts and the log."""

    def __init__(self, engine: sa.Engine, sink: str | None = None,
                 sessions: sessionmaker[Session] | None = None) -> None:
        self.engine = engine
        self._sink = sink
        self._session = sessions or sessionmaker(engine, expire_on_commit=False)

    def for_sink(self, sink: str) -> SinkStore:
        """The same database, bound to the rows of the sink named `sink`."""
        if not sink:
            raise ValueError("a sink needs a name")
        return SinkStore(self.engine, sink, self._session)

    @property
    def sink(self) -> str:
        if self._sink is None:
            raise RuntimeError("this store is bound to no sink: use SinkStore.for_sink(name)")
        return self._sink

    def session(self) -> Session:
        return self._session()

    def adopt(self, kind: str, sink: str) -> int:
        """Give the rows of `kind` (tickets, chat) written before sinks had names (migration 0008) to
        `sink`, the first configured destination of that kind: the one that wrote them. Returns the
        number of rows."""
        adopted = 0
        with self.session() as s, s.begin():
            for table in SINK_TABLES[kind]:
                result = s.execute(sa.update(table).where(table.sink == UNATTRIBUTED).values(sink=sink))
                adopted += cast("sa.CursorResult[Any]", result).rowcount
        return adopted

    # --- tickets ---------------------------------------------------------------------------------
    def ticket(self, incident_id: str) -> TicketRow | None:
        with self.session() as s:
            return s.get(TicketRow, (self.sink, incident_id))

    @staticmethod
    def state_of(row: TicketRow, resolved: bool = False, attached: frozenset[str] | None = None) -> TicketState:
        return TicketState(key=row.ticket_key, created_at=row.created_at, category=row.category, count=row.count,
                           last_comment_at=row.last_comment_at,
                           attached=frozenset(row.attached) | (attached or frozenset()), resolved=resolved)

    def put_ticket(self, *, incident_id: str, fingerprint: str, key: str, tracker: str, category: str, count: int,
                   now: datetime, attached: Sequence[str] = (), recovered: bool = False,
                   commented: bool = False) -> TicketRow:
        with self.session() as s, s.begin():
            row = s.get(TicketRow, (self.sink, incident_id))
            if row is None:
                row = TicketRow(sink=self.sink, incident_id=incident_id, fingerprint=fingerprint, ticket_key=key,
                                tracker=tracker, category=category, count=count, attached=sorted(set(attached)),
                                created_at=now, updated_at=now, last_comment_at=now if commented else None,
                                recovered=recovered)
                s.add(row)
            else:
                row.ticket_key, row.category, row.count, row.updated_at = key, category, count, now
                row.attached = sorted(set(row.attached) | set(attached))
                if commented:
                    row.last_comment_at = now
            return row

    def add_attached(self, incident_id: str, names: Sequence[str], now: datetime) -> None:
        with self.session() as s, s.begin():
            row = s.get(TicketRow, (self.sink, incident_id))
            if row is not None:
                row.attached = sorted(set(row.attached) | set(names))
                row.updated_at = now

    def tickets(self) -> list[TicketRow]:
        with self.session() as s:
            q = sa.select(TicketRow).where(TicketRow.sink == self.sink).order_by(TicketRow.created_at)
            return list(s.scalars(q))

    # --- the ticket queue ------------------------------------------------------------------------
    def enqueue_ticket(self, incident_id: str, payload: dict[str, Any], now: datetime) -> None:
        with self.session() as s, s.begin():
            row = s.get(TicketJobRow, (self.sink, incident_id))
            if row is None:
                s.add(TicketJobRow(sink=self.sink, incident_id=incident_id, payload=payload, status="pending",
                                   attempts=0, next_attempt_at=now, last_error=None, updated_at=now))
                return
            if _newer(payload, row.payload):
                row.payload = payload
            if row.status != "pending":
                row.status, row.attempts, row.next_attempt_at = "pending", 0, now
            elif row.attempts == 0:
                row.next_attempt_at = min(row.next_attempt_at, now)
            row.updated_at = now

    def job(self, incident_id: str) -> TicketJobRow | None:
        with self.session() as s:
            return s.get(TicketJobRow, (self.sink, incident_id))

    def jobs(self, status: str | None = None) -> list[TicketJobRow]:
        with self.session() as s:
            q = sa.select(TicketJobRow).where(TicketJobRow.sink == self.sink).order_by(TicketJobRow.updated_at)
            if status:
                q = q.where(TicketJobRow.status == status)
            return list(s.scalars(q))

    def due_jobs(self, now: datetime, limit: int = 100) -> list[str]:
        with self.session() as s:
            q = (sa.select(TicketJobRow.incident_id)
                 .where(TicketJobRow.sink == self.sink, TicketJobRow.status == "pending",
                        TicketJobRow.next_attempt_at <= now)
                 .order_by(TicketJobRow.next_attempt_at).limit(limit))
            return list(s.scalars(q))

    def finish_job(self, incident_id: str, status: str, now: datetime, *, decision: str, error: str | None = None,
                   next_attempt_at: datetime | None = None, failed_attempt: bool = False) -> None:
        with self.session() as s, s.begin():
            row = s.get(TicketJobRow, (self.sink, incident_id))
            if row is None:
                return
            row.status = status
            row.last_decision = decision
            row.last_error = error
            row.attempts = row.attempts + 1 if failed_attempt else 0
            row.next_attempt_at = next_attempt_at or now
            row.updated_at = now

    # --- chat alerts and the notification log -----------------------------------------------------
    def upsert_alert(self, *, fingerprint: str, group_key: str, channel: str, incident_id: str,
                     labels: dict[str, str], status: str, starts_at: datetime, payload: dict[str, Any],
                     now: datetime) -> None:
        with self.session() as s, s.begin():
            row = s.get(ChatAlertRow, (self.sink, fingerprint))
            if row is None:
                s.add(ChatAlertRow(sink=self.sink, fingerprint=fingerprint, group_key=group_key, channel=channel,
                                   incident_id=incident_id, labels=labels, status=status, starts_at=starts_at,
                                   payload=payload, updated_at=now))
            elif _newer(payload, row.payload):
                row.group_key, row.channel, row.labels, row.status = group_key, channel, labels, status
                row.payload, row.updated_at = payload, now

    def alert(self, incident_id: str) -> ChatAlertRow | None:
        """The sink's alert of an incident (its group and channel), or None when it never had it."""
        with self.session() as s:
            return s.scalars(sa.select(ChatAlertRow).where(ChatAlertRow.sink == self.sink,
                                                           ChatAlertRow.incident_id == incident_id).limit(1)).first()

    def alerts(self, group_key: str) -> list[ChatAlertRow]:
        with self.session() as s:
            return list(s.scalars(sa.select(ChatAlertRow).where(ChatAlertRow.sink == self.sink,
                                                                ChatAlertRow.group_key == group_key)
                                  .order_by(ChatAlertRow.starts_at, ChatAlertRow.fingerprint)))

    def group_keys(self) -> list[str]:
        with self.session() as s:
            return list(s.scalars(sa.select(ChatAlertRow.group_key).where(ChatAlertRow.sink == self.sink)
                                  .distinct().order_by(ChatAlertRow.group_key)))

    def prune_alerts(self, before: datetime) -> int:
        """Forget groups whose alerts are all resolved, whose resolution was sent, last changed before `before`."""
        removed = 0
        with self.session() as s, s.begin():
            mine = ChatAlertRow.sink == self.sink
            for gk in list(s.scalars(sa.select(ChatAlertRow.group_key).where(mine).distinct())):
                rows = list(s.scalars(sa.select(ChatAlertRow).where(mine, ChatAlertRow.group_key == gk)))
                entry = s.get(NotificationLogRow, (self.sink, gk))
                if entry is None or any(r.status != "resolved" or r.updated_at >= before for r in rows):
                    continue
                told = content_hash(Alert(r.fingerprint, r.labels, "resolved", r.starts_at) for r in rows)
                if told != entry.content_hash:
                    continue
                for r in rows:
                    s.delete(r)
                removed += len(rows)
        return removed

    def sent(self, group_key: str) -> NotificationLogRow | None:
        with self.session() as s:
            return s.get(NotificationLogRow, (self.sink, group_key))

    def log_sent(self, *, group_key: str, channel: str, thread_ts: str | None, last_ts: str | None,
                 content_hash: str, sent_at: datetime, transport: str) -> None:
        """The notification log: call only after the send succeeded."""
        with self.session() as s, s.begin():
            row = s.get(NotificationLogRow, (self.sink, group_key))
            if row is None:
                s.add(NotificationLogRow(sink=self.sink, group_key=group_key, channel=channel, thread_ts=thread_ts,
                                         last_ts=last_ts, content_hash=content_hash, sent_at=sent_at, messages=1,
                                         transport=transport))
            else:
                row.channel, row.last_ts, row.content_hash, row.sent_at = channel, last_ts, content_hash, sent_at
                row.thread_ts = thread_ts or row.thread_ts
                row.messages += 1
            failure = s.get(ChatFailureRow, (self.sink, group_key))
            if failure is not None:
                s.delete(failure)

    def notification_log(self) -> list[NotificationLogRow]:
        with self.session() as s:
            return list(s.scalars(sa.select(NotificationLogRow).where(NotificationLogRow.sink == self.sink)
                                  .order_by(NotificationLogRow.sent_at)))

    def failure(self, group_key: str) -> ChatFailureRow | None:
        with self.session() as s:
            return s.get(ChatFailureRow, (self.sink, group_key))

    def record_failure(self, group_key: str, channel: str, error: str, next_attempt_at: datetime, now: datetime,
                       permanent: bool) -> ChatFailureRow:
        with self.session() as s, s.begin():
            row = s.get(ChatFailureRow, (self.sink, group_key))
            if row is None:
                row = ChatFailureRow(sink=self.sink, group_key=group_key, channel=channel, attempts=0,
                                     next_attempt_at=next_attempt_at, last_error=error, permanent=permanent,
                                     updated_at=now)
                s.add(row)
            row.attempts += 1
            row.last_error, row.next_attempt_at, row.permanent, row.updated_at = error, next_attempt_at, permanent, now
            return row

    # --- pages ------------------------------------------------------------------------------------
    def upsert_page(self, incident_id: str, payload: dict[str, Any], now: datetime) -> None:
        """The incident's latest snapshot for this paging sink, due for a decision now (a dead one revives:
        the new snapshot may be what the destination accepts)."""
        with self.session() as s, s.begin():
            row = s.get(PageRow, (self.sink, incident_id))
            if row is None:
                s.add(PageRow(sink=self.sink, incident_id=incident_id, payload=payload, extra_steps=[],
                              told_status=None, told_revision="", told_steps=[], told_labels={}, generation=0,
                              sent_at=None, state="pending", attempts=0, next_attempt_at=now, last_error=None,
                              last_decision=None, updated_at=now))
                return
            if _newer(payload, row.payload):
                row.payload = payload
            _due_now(row, now)

    def add_page_step(self, incident_id: str, step: dict[str, Any], now: datetime) -> bool:
        """A remediation transition to tell (`step`: key, at, text), once per key; False when this sink
        never had the incident."""
        with self.session() as s, s.begin():
            row = s.get(PageRow, (self.sink, incident_id))
            if row is None:
                return False
            if all(x.get("key") != step["key"] for x in row.extra_steps):
                row.extra_steps = [*row.extra_steps, step]
                _due_now(row, now)
            return True

    def page(self, incident_id: str) -> PageRow | None:
        with self.session() as s:
            return s.get(PageRow, (self.sink, incident_id))

    def pages(self, state: str | None = None) -> list[PageRow]:
        with self.session() as s:
            q = sa.select(PageRow).where(PageRow.sink == self.sink).order_by(PageRow.incident_id)
            if state:
                q = q.where(PageRow.state == state)
            return list(s.scalars(q))

    def due_pages(self, now: datetime, limit: int = 100) -> list[str]:
        with self.session() as s:
            q = (sa.select(PageRow.incident_id)
                 .where(PageRow.sink == self.sink, PageRow.state.in_(PAGE_DUE_STATES), PageRow.next_attempt_at <= now)
                 .order_by(PageRow.next_attempt_at).limit(limit))
            return list(s.scalars(q))

    def page_told(self, incident_id: str, *, status: str, revision: str, steps: Sequence[str],
                  labels: dict[str, str], generation: int, sent_at: datetime) -> None:
        """What the destination was told: call only after it accepted the event."""
        with self.session() as s, s.begin():
            row = s.get(PageRow, (self.sink, incident_id))
            if row is None:
                return
            row.told_status, row.told_revision, row.told_labels = status, revision, labels
            row.told_steps = sorted(set(row.told_steps) | set(steps))
            row.generation, row.sent_at, row.attempts, row.last_error = generation, sent_at, 0, None
            row.updated_at = sent_at

    def page_settled(self, incident_id: str, state: str, next_attempt_at: datetime, decision: str,
                     now: datetime) -> None:
        """Nothing more is due now: `idle` until a resend at `next_attempt_at`, or `done`."""
        with self.session() as s, s.begin():
            row = s.get(PageRow, (self.sink, incident_id))
            if row is not None:
                row.state, row.next_attempt_at, row.last_decision = state, next_attempt_at, decision
                row.updated_at = now

    def page_failed(self, incident_id: str, error: str, next_attempt_at: datetime, dead: bool,
                    now: datetime) -> None:
        """A refused or failed event: retried at `next_attempt_at`, or `dead` (refused for good)."""
        with self.session() as s, s.begin():
            row = s.get(PageRow, (self.sink, incident_id))
            if row is not None:
                row.attempts += 1
                row.state = "dead" if dead else "pending"
                row.last_error, row.next_attempt_at, row.updated_at = error, next_attempt_at, now

    # --- silences --------------------------------------------------------------------------------
    def add_silence(self, matchers: Sequence[Matcher], starts_at: datetime, ends_at: datetime, created_by: str,
                    comment: str, now: datetime) -> Silence:
        if not matchers:
            raise ValueError("a silence needs at least one matcher")
        if ends_at <= starts_at:
            raise ValueError("a silence must end after it starts")
        sid = str(uuid.uuid4())
        with self.session() as s, s.begin():
            s.add(SilenceRow(id=sid, matchers=[str(m) for m in matchers], starts_at=starts_at, ends_at=ends_at,
                             created_by=created_by, comment=comment, created_at=now))
        return Silence(sid, tuple(matchers), starts_at, ends_at, created_by, comment)

    def silences(self, now: datetime | None = None, include_expired: bool = False) -> list[Silence]:
        with self.session() as s:
            rows = list(s.scalars(sa.select(SilenceRow).order_by(SilenceRow.starts_at, SilenceRow.id)))
        out = [Silence(r.id, tuple(Matcher.parse(m) for m in r.matchers), r.starts_at, r.ends_at, r.created_by,
                       r.comment) for r in rows]
        if include_expired or now is None:
            return out
        return [x for x in out if x.ends_at > now]

    def expire_silence(self, silence_id: str, now: datetime) -> Silence | None:
        """End a silence now; None when there is no silence with that id (or id prefix)."""
        with self.session() as s, s.begin():
            row = s.get(SilenceRow, silence_id)
            if row is None:
                hits = list(s.scalars(sa.select(SilenceRow).where(SilenceRow.id.startswith(silence_id))))
                row = hits[0] if len(hits) == 1 else None
            if row is None:
                return None
            if row.ends_at > now:
                row.ends_at = max(now, row.starts_at)
            return Silence(row.id, tuple(Matcher.parse(m) for m in row.matchers), row.starts_at, row.ends_at,
                           row.created_by, row.comment)
