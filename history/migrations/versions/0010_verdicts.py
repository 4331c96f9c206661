"""verdicts: one kernel record counted once

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03

`fault_events.record_key` and `boot_id`: the kernel record a report is a copy of (`models.record_identity`:
its monotonic stamp and text, or its kmsg sequence number) and the boot it was read in. The store drops a
later copy of a record already stored for the node (the same Xid line in kern.log and syslog), looked up
by (node, record_key).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("record_key", sa.String(length=96), nullable=True))
        batch_op.add_column(sa.Column("boot_id", sa.String(length=64), nullable=True))
        batch_op.create_index("ix_fault_events_record_key", ["node", "record_key"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.drop_index("ix_fault_events_record_key")
        batch_op.drop_column("boot_id")
        batch_op.drop_column("record_key")
