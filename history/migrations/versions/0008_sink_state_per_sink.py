"""sink state per sink

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Any number of sinks can run at once (two chat destinations, two trackers), each with its own
delivery state: `tickets`, `ticket_queue`, `chat_alerts`, `notification_log` and `chat_failures`
gain a `sink` column (the destination's name: `jira`, `slack`, `outbox`, ...) that leads their
primary key; `chat_alerts` is indexed by (sink, group key) instead of the group key alone.

Until now each kind had one sink, the first configured destination of its port, and the rows were
its own. Which destination that was is configuration, which a migration cannot see: existing rows
get the sink `''` (`history.sink_tables.UNATTRIBUTED`), and at its start the responder gives them to
the first configured destination of their kind (`respond.sinks.sink_store.SinkStore.adopt`), the
one that wrote them. The downgrade keeps one row per incident or group: the one of the sink whose
name sorts first.

Each table is rebuilt (renamed, created anew, filled, the old one dropped): a primary key cannot be
changed in place on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_Utc = history.tables.UtcDateTime
_OLD = "_before_0008"


def _tickets() -> list[sa.Column[Any]]:
    return [
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("ticket_key", sa.String(length=64), nullable=False),
        sa.Column("tracker", sa.String(length=16), nullable=False),
        sa.Column("category", sa.String(length=32), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("attached", sa.JSON(), nullable=False),
        sa.Column("created_at", _Utc(timezone=True), nullable=False),
        sa.Column("updated_at", _Utc(timezone=True), nullable=False),
        sa.Column("last_comment_at", _Utc(timezone=True), nullable=True),
        sa.Column("recovered", sa.Boolean(), nullable=False),
    ]


def _ticket_queue() -> list[sa.Column[Any]]:
    return [
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _Utc(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_decision", sa.Text(), nullable=True),
        sa.Column("updated_at", _Utc(timezone=True), nullable=False),
    ]


def _chat_alerts() -> list[sa.Column[Any]]:
    return [
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("group_key", sa.String(length=512), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=False),
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("starts_at", _Utc(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("updated_at", _Utc(timezone=True), nullable=False),
    ]


def _notification_log() -> list[sa.Column[Any]]:
    return [
        sa.Column("group_key", sa.String(length=512), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=False),
        sa.Column("thread_ts", sa.String(length=64), nullable=True),
        sa.Column("last_ts", sa.String(length=64), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("sent_at", _Utc(timezone=True), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.Column("transport", sa.String(length=16), nullable=False),
    ]


def _chat_failures() -> list[sa.Column[Any]]:
    return [
        sa.Column("group_key", sa.String(length=512), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _Utc(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("permanent", sa.Boolean(), nullable=False),
        sa.Column("updated_at", _Utc(timezone=True), nullable=False),
    ]


# Each table: its columns but the sink, its key without the sink, and its indexes before and after.
_TABLES: dict[str, tuple[Callable[[], list[sa.Column[Any]]], str, dict[str, list[str]], dict[str, list[str]]]] = {
    "tickets": (_tickets, "incident_id", {"ix_tickets_fingerprint": ["fingerprint"],
                                          "ix_tickets_ticket_key": ["ticket_key"]},
                {"ix_tickets_fingerprint": ["fingerprint"], "ix_tickets_ticket_key": ["ticket_key"]}),
    "ticket_queue": (_ticket_queue, "incident_id", {"ix_ticket_queue_status": ["status"]},
                     {"ix_ticket_queue_status": ["status"]}),
    "chat_alerts": (_chat_alerts, "fingerprint", {"ix_chat_alerts_group_key": ["group_key"]},
                    {"ix_chat_alerts_sink_group_key": ["sink", "group_key"]}),
    "notification_log": (_notification_log, "group_key", {}, {}),
    "chat_failures": (_chat_failures, "group_key", {}, {}),
}


def _set_aside(name: str) -> str:
    """Rename the table out of the way, free of its indexes and primary key name (both are named
    per schema, not per table, on PostgreSQL; SQLite renames its own)."""
    old = f"{name}{_OLD}"
    op.rename_table(name, old)
    inspector = sa.inspect(op.get_bind())
    for index in inspector.get_indexes(old):
        if index["name"]:
            op.drop_index(index["name"], table_name=old)
    if op.get_bind().dialect.name == "postgresql":
        pk = inspector.get_pk_constraint(old).get("name")
        if pk:
            op.drop_constraint(pk, old, type_="primary")
    return old


def _rebuild(name: str, with_sink: bool) -> None:
    columns, key, before, after = _TABLES[name]
    old = _set_aside(name)
    kept = [c.name for c in columns()]
    sink = [sa.Column("sink", sa.String(length=64), nullable=False)] if with_sink else []
    op.create_table(name, *sink, *columns(), sa.PrimaryKeyConstraint(*(["sink"] if with_sink else []), key))
    for index, on in (after if with_sink else before).items():
        op.create_index(index, name, on, unique=False)
    source = sa.table(old, *(sa.column(c) for c in [*kept, "sink"]))
    target = sa.table(name, *(sa.column(c) for c in [*kept, "sink"]))
    if with_sink:
        rows = sa.select(*(source.c[c] for c in kept), sa.literal("").label("sink"))
        op.execute(sa.insert(target).from_select([*kept, "sink"], rows))
    else:  # one row per key: the one of the sink whose name sorts first
        inner = source.alias("inner")
        first = sa.select(sa.func.min(inner.c.sink)).where(inner.c[key] == source.c[key]).scalar_subquery()
        rows = sa.select(*(source.c[c] for c in kept)).where(source.c.sink == first)
        op.execute(sa.insert(target).from_select(kept, rows))
    op.drop_table(old)


def upgrade() -> None:
    for name in _TABLES:
        _rebuild(name, with_sink=True)


def downgrade() -> None:
    for name in _TABLES:
        _rebuild(name, with_sink=False)
