"""stream pipeline tables

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "evidence",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("record_id", sa.String(length=512), nullable=False),
        sa.Column("trigger_record_id", sa.String(length=512), nullable=False),
        sa.Column("fault_event_id", sa.Integer(), nullable=True),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=True),
        sa.Column("pci", sa.String(length=32), nullable=True),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("captured_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
        sa.Column("items", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("node", "record_id", name="uq_evidence_record"),
    )
    with op.batch_alter_table("evidence", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_evidence_fault_event_id"), ["fault_event_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_evidence_trigger_record_id"), ["trigger_record_id"], unique=False)

    op.create_table(
        "fault_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("record_id", sa.String(length=512), nullable=False),
        sa.Column("sources", sa.String(length=32), nullable=False),
        sa.Column("nvml_record_id", sa.String(length=512), nullable=True),
        sa.Column("partner_hash", sa.String(length=64), nullable=True),
        sa.Column("occurred_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("ingested_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("code", sa.String(length=64), nullable=False),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("sxid", sa.Integer(), nullable=True),
        sa.Column("gpu", sa.String(length=128), nullable=False),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=True),
        sa.Column("serial", sa.String(length=64), nullable=True),
        sa.Column("pci", sa.String(length=32), nullable=True),
        sa.Column("mig_uuid", sa.String(length=128), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("process", sa.String(length=256), nullable=True),
        sa.Column("pod", sa.String(length=253), nullable=True),
        sa.Column("namespace", sa.String(length=253), nullable=True),
        sa.Column("container", sa.String(length=253), nullable=True),
        sa.Column("workload", sa.String(length=512), nullable=True),
        sa.Column("catalog_category", sa.String(length=32), nullable=True),
        sa.Column("mnemonic", sa.String(length=256), nullable=True),
        sa.Column("immediate_action", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("raw", sa.Text(), nullable=False),
        sa.Column("attribution", sa.JSON(), nullable=False),
        sa.Column("incident_id", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("node", "content_hash", name="uq_fault_events_content"),
    )
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.create_index("ix_fault_events_family_time", ["family", "occurred_at"], unique=False)
        batch_op.create_index("ix_fault_events_gpu_time", ["node", "gpu", "occurred_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_fault_events_incident_id"), ["incident_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_fault_events_partner_hash"), ["partner_hash"], unique=False)
        batch_op.create_index(batch_op.f("ix_fault_events_record_id"), ["record_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_fault_events_workload"), ["workload"], unique=False)

    op.create_table(
        "fleet_incidents",
        sa.Column("fleet_id", sa.String(length=160), nullable=False),
        sa.Column("cluster", sa.String(length=128), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("first_seen", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("last_seen", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", history.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("fleet_id"),
    )
    with op.batch_alter_table("fleet_incidents", schema=None) as batch_op:
        batch_op.create_index(
            "uq_fleet_open",
            ["cluster", "family"],
            unique=True,
            postgresql_where=sa.text("status = 'open'"),
            sqlite_where=sa.text("status = 'open'"),
        )

    op.create_table(
        "gpu_assignments",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu", sa.String(length=128), nullable=False),
        sa.Column("workload", sa.String(length=512), nullable=False),
        sa.Column("pod", sa.String(length=253), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("container", sa.String(length=253), nullable=False),
        sa.Column("seen_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("gpu_assignments", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_assignments_workload_time", ["workload", "seen_at"], unique=False)

    op.create_table(
        "incidents",
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("gpu", sa.String(length=128), nullable=False),
        sa.Column("family", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("category", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_seen", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("last_seen", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("opened_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("updated_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", history.tables.UtcDateTime(timezone=True), nullable=True),
        sa.Column("previous_incident_id", sa.String(length=128), nullable=True),
        sa.Column("gpu_uuid", sa.String(length=128), nullable=True),
        sa.Column("serial", sa.String(length=64), nullable=True),
        sa.Column("pci", sa.String(length=32), nullable=True),
        sa.Column("codes", sa.JSON(), nullable=False),
        sa.Column("pods", sa.JSON(), nullable=False),
        sa.Column("processes", sa.JSON(), nullable=False),
        sa.Column("workloads", sa.JSON(), nullable=False),
        sa.Column("immediate_action", sa.String(length=64), nullable=True),
        sa.Column("investigatory_action", sa.String(length=128), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("cordon_requested", sa.Boolean(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("incident_id"),
    )
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.create_index("ix_incidents_fingerprint_opened", ["fingerprint", "opened_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_incidents_node"), ["node"], unique=False)
        batch_op.create_index(
            "uq_incidents_open_fingerprint",
            ["fingerprint"],
            unique=True,
            postgresql_where=sa.text("status = 'open'"),
            sqlite_where=sa.text("status = 'open'"),
        )

    op.create_table(
        "node_state",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("record_id", sa.String(length=512), nullable=False),
        sa.Column("valid_from", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("node_state", schema=None) as batch_op:
        batch_op.create_index("ix_node_state_node_time", ["node", "valid_from"], unique=False)

    op.create_table(
        "outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.String(length=512), nullable=False),
        sa.Column("stream", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=253), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("sent_at", history.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("idempotency_key"),
    )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index("ix_outbox_unsent", ["sent_at", "id"], unique=False)

    op.create_table(
        "seen_records",
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("record_id", sa.String(length=512), nullable=False),
        sa.Column("topic", sa.String(length=255), nullable=False),
        sa.Column("seen_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("node", "record_id"),
    )


def downgrade() -> None:
    op.drop_table("seen_records")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_unsent")

    op.drop_table("outbox")
    with op.batch_alter_table("node_state", schema=None) as batch_op:
        batch_op.drop_index("ix_node_state_node_time")

    op.drop_table("node_state")
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_incidents_open_fingerprint",
            postgresql_where=sa.text("status = 'open'"),
            sqlite_where=sa.text("status = 'open'"),
        )
        batch_op.drop_index(batch_op.f("ix_incidents_node"))
        batch_op.drop_index("ix_incidents_fingerprint_opened")

    op.drop_table("incidents")
    with op.batch_alter_table("gpu_assignments", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_assignments_workload_time")

    op.drop_table("gpu_assignments")
    with op.batch_alter_table("fleet_incidents", schema=None) as batch_op:
        batch_op.drop_index(
            "uq_fleet_open", postgresql_where=sa.text("status = 'open'"), sqlite_where=sa.text("status = 'open'")
        )

    op.drop_table("fleet_incidents")
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_fault_events_workload"))
        batch_op.drop_index(batch_op.f("ix_fault_events_record_id"))
        batch_op.drop_index(batch_op.f("ix_fault_events_partner_hash"))
        batch_op.drop_index(batch_op.f("ix_fault_events_incident_id"))
        batch_op.drop_index("ix_fault_events_gpu_time")
        batch_op.drop_index("ix_fault_events_family_time")

    op.drop_table("fault_events")
    with op.batch_alter_table("evidence", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_evidence_trigger_record_id"))
        batch_op.drop_index(batch_op.f("ix_evidence_fault_event_id"))

    op.drop_table("evidence")
