"""incident components, occurrences and verdict provenance

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

An incident is the fault of one component (a GPU, an NVSwitch, a node's driver, a workload, the
fleet), no longer of one (node, GPU, fault family). `component` and `component_id` say which;
`occurrence_at` and `occurrence_signals` hold the fault occurrence the incident last counted, so
every sensor's report of that one fault (kernel and NVML Xid, AER with Xid 79 and the GPU-lost
lines, Xid 119 with its crash dump and Xid 154) joins it without counting again. The verdict
records what it was made with: `catalog_version`, the node's `driver_version` at fault time and the
`rule` that made it. `merged_into` names the incident that absorbed this one (workload faults found
to stay with a GPU). `fault_events.counted` says whether a report counted a new occurrence
(its time is one of the occurrences the cordon policy's windows count). Existing incidents are
GPU incidents (or node incidents where they named no GPU).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("component", sa.String(length=16), server_default="gpu", nullable=False))
        batch_op.add_column(sa.Column("component_id", sa.String(length=253), nullable=True))
        batch_op.add_column(sa.Column("occurrence_at", history.tables.UtcDateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("occurrence_signals", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("catalog_version", sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column("driver_version", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("rule", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("merged_into", sa.String(length=128), nullable=True))
        batch_op.create_index("ix_incidents_component_last_seen", ["component", "last_seen"], unique=False)
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.add_column(sa.Column("counted", sa.Boolean(), nullable=True))
    op.execute("UPDATE incidents SET component = 'node' WHERE gpu = 'node'")
    op.execute("UPDATE incidents SET component_id = gpu WHERE component_id IS NULL")


def downgrade() -> None:
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.drop_column("counted")
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_index("ix_incidents_component_last_seen")
        for column in ("merged_into", "rule", "driver_version", "catalog_version", "occurrence_signals",
                       "occurrence_at", "component_id", "component"):
            batch_op.drop_column(column)
