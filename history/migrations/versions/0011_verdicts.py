"""verdicts: one kernel record counted once; sympathetic faults follow their cause

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

`fault_events.record_key` and `boot_id`: the kernel record a report is a copy of (`models.record_identity`:
its monotonic stamp and text, or its kmsg sequence number) and the boot it was read in. The store drops a
later copy of a record already stored for the node (the same Xid line in kern.log and syslog), looked up
by (node, record_key).

`fault_events.sympathetic`: the report is a sympathetic report of its incident's hardware fault
(`models.sympathetic`: the Xid 45 of a job a double-bit error killed). `incidents.affected`: the workloads
such a fault killed; `incidents.occurrence_pids`: the processes the occurrence counted last named (only
the process a contained Xid 94 names follows it); `incidents.recovery_action`: NVIDIA's current
instruction for the GPU, the recovery action its latest Xid 154 decoded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("record_key", sa.String(length=96), nullable=True))
        batch_op.add_column(sa.Column("boot_id", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_fault_events_record_key", ["node", "record_key"], unique=False)
        batch_op.add_column(sa.Column("sympathetic", sa.Boolean(), nullable=True))
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("affected", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("occurrence_pids", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("recovery_action", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        for column in ("recovery_action", "occurrence_pids", "affected"):
            batch_op.drop_column(column)
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.drop_column("sympathetic")
        batch_op.drop_index("ix_fault_events_record_key")
        batch_op.drop_column("boot_id")
        batch_op.drop_column("record_key")
