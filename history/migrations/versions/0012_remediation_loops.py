"""remediation loops: the closed loop after the cordon, its attempts and transitions, the GPU ledger's RMAs

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

`remediation_loops` (one per xidpipe cordon of a node for an incident: its stage, the remedy under
way, the operator's pause or cancel, a version per transition), `remediation_attempts` (each Job or
hand-off reserved before it is created: the budgets count them, their names are the Jobs'
idempotency keys), `remediation_transitions` (each stage change, told to the ticket and the chat
once), `gpu_rma` (cards marked for RMA until a new card appears in their slot).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _at(name: str, nullable: bool = False) -> sa.Column[object]:
    return sa.Column(name, history.tables.UtcDateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "remediation_loops",
        sa.Column("loop_id", sa.String(length=32), nullable=False),
        sa.Column("incident_id", sa.String(length=512), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu", sa.String(length=128), nullable=False),
        sa.Column("card", sa.String(length=160), nullable=False),
        sa.Column("pool", sa.String(length=253), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("cordoned_at", sa.String(length=64), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("remedy", sa.String(length=16), nullable=True),
        sa.Column("via", sa.String(length=16), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("validation", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("paused_by", sa.String(length=253), nullable=True),
        sa.Column("cancel_requested", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("boot_id", sa.String(length=64), nullable=True),
        _at("opened_at"), _at("stage_since"), _at("updated_at"), _at("deadline_at"), _at("closed_at", True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("loop_id"),
    )
    with op.batch_alter_table("remediation_loops", schema=None) as batch_op:
        batch_op.create_index("ix_remediation_loops_stage", ["stage", "opened_at"], unique=False)
        batch_op.create_index("ix_remediation_loops_node", ["node", "opened_at"], unique=False)
        batch_op.create_index("ix_remediation_loops_incident", ["incident_id"], unique=False)
        batch_op.create_index("ix_remediation_loops_card", ["card", "opened_at"], unique=False)
    op.create_table(
        "remediation_attempts",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("loop_id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("via", sa.String(length=16), nullable=False),
        sa.Column("job_name", sa.String(length=63), nullable=False),
        sa.Column("incident_id", sa.String(length=512), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("card", sa.String(length=160), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("validated", sa.String(length=8), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        _at("reserved_at"), _at("finished_at", True),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("loop_id", "kind", "seq", name="uq_remediation_attempts_key"),
    )
    with op.batch_alter_table("remediation_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_remediation_attempts_node", ["node", "reserved_at"], unique=False)
        batch_op.create_index("ix_remediation_attempts_card", ["card", "reserved_at"], unique=False)
    op.create_table(
        "remediation_transitions",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("loop_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("incident_id", sa.String(length=512), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("from_stage", sa.String(length=16), nullable=True),
        sa.Column("to_stage", sa.String(length=16), nullable=False),
        _at("at"),
        sa.Column("actor", sa.String(length=253), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        _at("told_at", True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("loop_id", "seq", name="uq_remediation_transitions_seq"),
    )
    with op.batch_alter_table("remediation_transitions", schema=None) as batch_op:
        batch_op.create_index("ix_remediation_transitions_incident", ["incident_id", "at"], unique=False)
        batch_op.create_index("ix_remediation_transitions_untold", ["told_at", "id"], unique=False)
    op.create_table(
        "gpu_rma",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("card", sa.String(length=160), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pci_slot", sa.String(length=32), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=True),
        sa.Column("incident_id", sa.String(length=512), nullable=False),
        sa.Column("loop_id", sa.String(length=32), nullable=False),
        _at("opened_at"),
        sa.Column("reason", sa.Text(), nullable=False),
        _at("closed_at", True),
        sa.Column("replaced_by", sa.String(length=160), nullable=True),
        sa.Column("close_reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("loop_id", name="uq_gpu_rma_loop"),
    )
    with op.batch_alter_table("gpu_rma", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_rma_card", ["card", "closed_at"], unique=False)
        batch_op.create_index("ix_gpu_rma_slot", ["node", "pci_slot"], unique=False)


def downgrade() -> None:
    for table in ("gpu_rma", "remediation_transitions", "remediation_attempts", "remediation_loops"):
        op.drop_table(table)
