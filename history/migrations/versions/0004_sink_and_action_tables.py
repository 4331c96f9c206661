"""sink and action record tables under the migrations

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

The ticket map and queue, chat alerts, the notification log, chat failures and silences
(`history.sink_tables`), and the action record and cordon breaker (`history.action_tables`).
Until now their stores created them when they opened a database, so a deployment may hold them
already: a table that exists is left as it is (with its rows and indexes), only missing ones are
created. The downgrade drops all eight.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_Utc = history.tables.UtcDateTime


def _tickets() -> None:
    op.create_table(
        "tickets",
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
        sa.PrimaryKeyConstraint("incident_id"),
    )
    with op.batch_alter_table("tickets", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tickets_fingerprint"), ["fingerprint"], unique=False)
        batch_op.create_index(batch_op.f("ix_tickets_ticket_key"), ["ticket_key"], unique=False)


def _ticket_queue() -> None:
    op.create_table(
        "ticket_queue",
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _Utc(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_decision", sa.Text(), nullable=True),
        sa.Column("updated_at", _Utc(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("incident_id"),
    )
    with op.batch_alter_table("ticket_queue", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ticket_queue_status"), ["status"], unique=False)


def _chat_alerts() -> None:
    op.create_table(
        "chat_alerts",
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("group_key", sa.String(length=512), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=False),
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("starts_at", _Utc(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("updated_at", _Utc(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("fingerprint"),
    )
    with op.batch_alter_table("chat_alerts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_chat_alerts_group_key"), ["group_key"], unique=False)


def _notification_log() -> None:
    op.create_table(
        "notification_log",
        sa.Column("group_key", sa.String(length=512), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=False),
        sa.Column("thread_ts", sa.String(length=64), nullable=True),
        sa.Column("last_ts", sa.String(length=64), nullable=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("sent_at", _Utc(timezone=True), nullable=False),
        sa.Column("messages", sa.Integer(), nullable=False),
        sa.Column("transport", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("group_key"),
    )


def _chat_failures() -> None:
    op.create_table(
        "chat_failures",
        sa.Column("group_key", sa.String(length=512), nullable=False),
        sa.Column("channel", sa.String(length=128), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _Utc(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("permanent", sa.Boolean(), nullable=False),
        sa.Column("updated_at", _Utc(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("group_key"),
    )


def _silences() -> None:
    op.create_table(
        "silences",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("starts_at", _Utc(timezone=True), nullable=False),
        sa.Column("ends_at", _Utc(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_at", _Utc(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def _actions() -> None:
    op.create_table(
        "actions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=True),
        sa.Column("incident_id", sa.String(length=512), nullable=True),
        sa.Column("decision", sa.String(length=32), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("actor", sa.String(length=253), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("actions", schema=None) as batch_op:
        batch_op.create_index("ix_actions_action_at", ["action", "at"], unique=False)
        batch_op.create_index("ix_actions_node_at", ["node", "at"], unique=False)


def _cordon_breaker() -> None:
    op.create_table(
        "cordon_breaker",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


# Each table with the function that creates it (and its indexes), in creation order.
_TABLES: dict[str, Callable[[], None]] = {
    "tickets": _tickets,
    "ticket_queue": _ticket_queue,
    "chat_alerts": _chat_alerts,
    "notification_log": _notification_log,
    "chat_failures": _chat_failures,
    "silences": _silences,
    "actions": _actions,
    "cordon_breaker": _cordon_breaker,
}


def _has_table(name: str) -> bool:
    return sa.inspect(op.get_bind()).has_table(name)


def upgrade() -> None:
    for name, create in _TABLES.items():
        if not _has_table(name):
            create()


def downgrade() -> None:
    for name in reversed(_TABLES):
        if _has_table(name):
            op.drop_table(name)
