"""pages: what each paging sink told about each incident

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03

`pages` (one row per paging sink and incident: the latest snapshot, the remediation transitions
handed to it, what the destination was told (status, revision, steps, labels, generation, time),
written only after it accepted an event, and the retry state: pending, idle or dead).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def _at(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, history.tables.UtcDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "pages",
        sa.Column("sink", sa.String(length=64), nullable=False),
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("extra_steps", sa.JSON(), nullable=False),
        sa.Column("told_status", sa.String(length=16), nullable=True),
        sa.Column("told_revision", sa.String(length=32), nullable=False),
        sa.Column("told_steps", sa.JSON(), nullable=False),
        sa.Column("told_labels", sa.JSON(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        _at("sent_at", True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _at("next_attempt_at"),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_decision", sa.Text(), nullable=True),
        _at("updated_at"),
        sa.PrimaryKeyConstraint("sink", "incident_id"),
    )
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.create_index("ix_pages_sink_due", ["sink", "state", "next_attempt_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("pages", schema=None) as batch_op:
        batch_op.drop_index("ix_pages_sink_due")
    op.drop_table("pages")
