"""pending cordons: cordons the responder must offer again

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

One row per incident whose cordon is not settled: a retryable failure (`kind = 'retry'`, offered
again at `due_at`, `attempts` so far) or a cordon held by the tripped circuit breaker
(`kind = 'breaker'`, offered again once the breaker is reset). The row goes when the cordon is
settled (done, refused by the policy, or the incident ended).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_cordons",
        sa.Column("incident_id", sa.String(length=512), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("due_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("updated_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("incident_id"),
    )
    with op.batch_alter_table("pending_cordons", schema=None) as batch_op:
        batch_op.create_index("ix_pending_cordons_kind_due", ["kind", "due_at"], unique=False)


def downgrade() -> None:
    op.drop_table("pending_cordons")
