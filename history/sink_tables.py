"""SQL tables of the ticket and chat sinks (SQLAlchemy declarative; no engine or session here).

Every sink (a configured destination: `jira`, `slack`, `outbox`, ...) keeps its own delivery
state: the rows of the first five tables are keyed by the sink's name (`sink`) and the incident
or group, so one sink's failure, retry or record never blocks or repeats another's.

- `tickets`: the incident → ticket key map per tracker (the source of truth; the tracker's label
  search only recovers a lost row) and what the ticket already tells: occurrences, category,
  attachments, last comment.
- `ticket_queue`: work for each ticket sink, one row per incident holding its latest snapshot:
  `pending` until the tracker accepted it (a retry loop drains it with backoff), `done`, or
  `failed` with the tracker's error message when it refused it for good.
- `chat_alerts`: the incidents each chat sink knows, grouped by their group key.
- `notification_log`: what each chat sink sent where (channel, root ts, content hash, time);
  written only after a successful send. `chat_failures`: the last failed send of a group.
- `silences`: Alertmanager-style silences (matchers, start, end, author, comment), for every chat
  sink.
- `pages`: the incidents each paging sink (Alertmanager, PagerDuty, CloudEvents, the outbox)
  knows: the latest snapshot, what the destination was told (`models.paging.PageLog`, written only
  after it accepted an event), and the retry state: `pending` while events are due or retried with
  backoff, `idle`, or `dead` with the destination's error when it refused an event for good.

All times are UTC. The tables are on `history.tables.metadata`; migration 0004 creates them and
0008 keys them by sink, 0013 adds `pages`. Rows written before 0008 have `sink = ''` (`UNATTRIBUTED`) until the
responder's first start gives them to the sink that wrote them (`SinkStore.adopt`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from history.tables import Base

UNATTRIBUTED = ""  # the sink of rows written before sinks had names (migration 0008)
SINK_NAME = sa.String(64)


class TicketRow(Base):
    __tablename__ = "tickets"

    sink: Mapped[str] = mapped_column(SINK_NAME, primary_key=True)
    incident_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(64), index=True)
    ticket_key: Mapped[str] = mapped_column(sa.String(64), index=True)
    tracker: Mapped[str] = mapped_column(sa.String(16))  # the tracker's own name: jira, outbox
    category: Mapped[str] = mapped_column(sa.String(32))
    count: Mapped[int]
    attached: Mapped[list[str]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    last_comment_at: Mapped[datetime | None]
    recovered: Mapped[bool] = mapped_column(default=False)  # found by label search, not created by this map


class TicketJobRow(Base):
    __tablename__ = "ticket_queue"

    sink: Mapped[str] = mapped_column(SINK_NAME, primary_key=True)
    incident_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    payload: Mapped[dict[str, Any]]  # the latest snapshot: respond.sinks.model.IncidentNotice as JSON
    status: Mapped[str] = mapped_column(sa.String(16), index=True)  # pending, done, failed
    attempts: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    last_decision: Mapped[str | None] = mapped_column(sa.Text)
    updated_at: Mapped[datetime]


class ChatAlertRow(Base):
    __tablename__ = "chat_alerts"
    __table_args__ = (sa.Index("ix_chat_alerts_sink_group_key", "sink", "group_key"),)

    sink: Mapped[str] = mapped_column(SINK_NAME, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    group_key: Mapped[str] = mapped_column(sa.String(512))
    channel: Mapped[str] = mapped_column(sa.String(128))
    incident_id: Mapped[str] = mapped_column(sa.String(128))
    labels: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(sa.String(16))  # firing, resolved
    starts_at: Mapped[datetime]
    payload: Mapped[dict[str, Any]]  # the latest IncidentNotice as JSON, for rendering
    updated_at: Mapped[datetime]


class NotificationLogRow(Base):
    __tablename__ = "notification_log"

    sink: Mapped[str] = mapped_column(SINK_NAME, primary_key=True)
    group_key: Mapped[str] = mapped_column(sa.String(512), primary_key=True)
    channel: Mapped[str] = mapped_column(sa.String(128))
    thread_ts: Mapped[str | None] = mapped_column(sa.String(64))  # the root message (None for webhooks)
    last_ts: Mapped[str | None] = mapped_column(sa.String(64))
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    sent_at: Mapped[datetime]
    messages: Mapped[int] = mapped_column(default=1)
    transport: Mapped[str] = mapped_column(sa.String(16))  # the transport's own name: web, webhook, outbox


class ChatFailureRow(Base):
    __tablename__ = "chat_failures"

    sink: Mapped[str] = mapped_column(SINK_NAME, primary_key=True)
    group_key: Mapped[str] = mapped_column(sa.String(512), primary_key=True)
    channel: Mapped[str] = mapped_column(sa.String(128))
    attempts: Mapped[int]
    next_attempt_at: Mapped[datetime]
    last_error: Mapped[str] = mapped_column(sa.Text)
    permanent: Mapped[bool] = mapped_column(default=False)
    updated_at: Mapped[datetime]


class SilenceRow(Base):
    __tablename__ = "silences"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    matchers: Mapped[list[str]]  # Matcher strings: node="gpu-node-03"
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(sa.String(128))
    comment: Mapped[str] = mapped_column(sa.Text)
    created_at: Mapped[datetime]


class PageRow(Base):
    __tablename__ = "pages"
    __table_args__ = (sa.Index("ix_pages_sink_due", "sink", "state", "next_attempt_at"),)

    sink: Mapped[str] = mapped_column(SINK_NAME, primary_key=True)
    incident_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    payload: Mapped[dict[str, Any]]  # the latest snapshot: respond.sinks.model.IncidentNotice as JSON
    extra_steps: Mapped[list[Any]]  # remediation transitions handed to the sink: [{key, at, text}]
    told_status: Mapped[str | None] = mapped_column(sa.String(16))  # firing, resolved; None: never told
    told_revision: Mapped[str] = mapped_column(sa.String(32))
    told_steps: Mapped[list[str]]  # the keys of the steps told
    told_labels: Mapped[dict[str, Any]]  # the labels of the alert last accepted (Alertmanager's identity)
    generation: Mapped[int]  # how often the incident was opened to the destination
    sent_at: Mapped[datetime | None]
    state: Mapped[str] = mapped_column(sa.String(16))  # pending, idle, dead
    attempts: Mapped[int]
    next_attempt_at: Mapped[datetime]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    last_decision: Mapped[str | None] = mapped_column(sa.Text)
    updated_at: Mapped[datetime]
