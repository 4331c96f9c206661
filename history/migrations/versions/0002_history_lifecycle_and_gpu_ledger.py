"""incident lifecycle, GPU asset ledger, indexes for the history queries

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

- `incidents.lifecycle` (existing rows start `open`) and `incident_transitions`;
- the ledger: `gpu_cards`, `gpu_placements`, `gpu_ledger_events`, `gpu_ledger_nodes` (filled by the
  worker from each inventory it stores; `xidpipe gpus rebuild` fills it from stored inventories);
- indexes for `xidpipe incidents list|show`, `xidpipe gpus` and the HTTP API: incident pages by
  time, category, status, lifecycle and GPU; fault events by incident (with their time), Xid and
  namespace (replacing the single-column incident index); on PostgreSQL, a trigram index on the
  incident's workloads for `--owner` (with the `pg_trgm` extension, installed when allowed).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_cards",
        sa.Column("card", sa.String(length=160), nullable=False),
        sa.Column("serial", sa.String(length=64), nullable=True),
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pci_slot", sa.String(length=32), nullable=False),
        sa.Column("since", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("first_seen", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("last_seen", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("missing_since", history.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("card"),
    )
    with op.batch_alter_table("gpu_cards", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_cards_node_slot", ["node", "pci_slot"], unique=False)
        batch_op.create_index("ix_gpu_cards_serial", ["serial"], unique=False)
        batch_op.create_index("ix_gpu_cards_uuid", ["uuid"], unique=False)

    op.create_table(
        "gpu_ledger_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("card", sa.String(length=160), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pci_slot", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("previous_node", sa.String(length=253), nullable=True),
        sa.Column("previous_slot", sa.String(length=32), nullable=True),
        sa.Column("previous_card", sa.String(length=160), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("gpu_ledger_events", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_ledger_events_card_at", ["card", "at"], unique=False)
        batch_op.create_index("ix_gpu_ledger_events_node_at", ["node", "at"], unique=False)
        batch_op.create_index("ix_gpu_ledger_events_previous_card", ["previous_card"], unique=False)

    op.create_table(
        "gpu_ledger_nodes",
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("inventory_at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("node"),
    )
    op.create_table(
        "gpu_placements",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("card", sa.String(length=160), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("pci_slot", sa.String(length=32), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("serial", sa.String(length=64), nullable=True),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("mig_layout", sa.JSON(), nullable=False),
        sa.Column("vbios", sa.String(length=64), nullable=True),
        sa.Column("driver", sa.String(length=64), nullable=True),
        sa.Column("valid_from", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("valid_to", history.tables.UtcDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("gpu_placements", schema=None) as batch_op:
        batch_op.create_index("ix_gpu_placements_card_time", ["card", "valid_from"], unique=False)
        batch_op.create_index("ix_gpu_placements_node_open", ["node", "valid_to"], unique=False)
        batch_op.create_index("ix_gpu_placements_uuid", ["uuid"], unique=False)

    op.create_table(
        "incident_transitions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=False),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("at", history.tables.UtcDateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=253), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("incident_id", "to_state", name="uq_incident_transitions_to"),
    )
    with op.batch_alter_table("incident_transitions", schema=None) as batch_op:
        batch_op.create_index("ix_incident_transitions_incident_at", ["incident_id", "at"], unique=False)

    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_fault_events_incident_id"))
        batch_op.create_index("ix_fault_events_incident_time", ["incident_id", "occurred_at"], unique=False)
        batch_op.create_index("ix_fault_events_namespace_incident", ["namespace", "incident_id"], unique=False)
        batch_op.create_index("ix_fault_events_xid_incident", ["xid", "incident_id"], unique=False)

    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("lifecycle", sa.String(length=16), server_default="open", nullable=False))
        batch_op.create_index("ix_incidents_category_last_seen", ["category", "last_seen"], unique=False)
        batch_op.create_index("ix_incidents_first_seen", ["first_seen", "last_seen"], unique=False)
        batch_op.create_index("ix_incidents_gpu", ["gpu"], unique=False)
        batch_op.create_index("ix_incidents_gpu_uuid", ["gpu_uuid"], unique=False)
        batch_op.create_index("ix_incidents_last_seen", ["last_seen", "first_seen"], unique=False)
        batch_op.create_index("ix_incidents_lifecycle_last_seen", ["lifecycle", "last_seen"], unique=False)
        batch_op.create_index("ix_incidents_pci", ["pci"], unique=False)
        batch_op.create_index("ix_incidents_serial", ["serial"], unique=False)
        batch_op.create_index("ix_incidents_status_last_seen", ["status", "last_seen"], unique=False)

    _create_trigram_index()


def _create_trigram_index() -> None:
    """On PostgreSQL: the owner filter's substring search through an index, when `pg_trgm` is there
    or may be installed (a trusted extension: the database owner may). Without it the filter scans."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    if bind.execute(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")).first() is None:
        if bind.execute(sa.text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")).first() is None:
            return
        try:
            with bind.begin_nested():
                bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
        except sa.exc.DBAPIError:
            return
    op.execute("CREATE INDEX ix_incidents_workloads_trgm ON incidents "
               "USING gin ((CAST(workloads AS TEXT)) gin_trgm_ops)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_incidents_workloads_trgm")  # the extension stays: others may use it
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_index("ix_incidents_status_last_seen")
        batch_op.drop_index("ix_incidents_serial")
        batch_op.drop_index("ix_incidents_pci")
        batch_op.drop_index("ix_incidents_lifecycle_last_seen")
        batch_op.drop_index("ix_incidents_last_seen")
        batch_op.drop_index("ix_incidents_gpu_uuid")
        batch_op.drop_index("ix_incidents_gpu")
        batch_op.drop_index("ix_incidents_first_seen")
        batch_op.drop_index("ix_incidents_category_last_seen")
        batch_op.drop_column("lifecycle")

    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.drop_index("ix_fault_events_xid_incident")
        batch_op.drop_index("ix_fault_events_namespace_incident")
        batch_op.drop_index("ix_fault_events_incident_time")
        batch_op.create_index(batch_op.f("ix_fault_events_incident_id"), ["incident_id"], unique=False)

    with op.batch_alter_table("incident_transitions", schema=None) as batch_op:
        batch_op.drop_index("ix_incident_transitions_incident_at")

    op.drop_table("incident_transitions")
    with op.batch_alter_table("gpu_placements", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_placements_uuid")
        batch_op.drop_index("ix_gpu_placements_node_open")
        batch_op.drop_index("ix_gpu_placements_card_time")

    op.drop_table("gpu_placements")
    op.drop_table("gpu_ledger_nodes")
    with op.batch_alter_table("gpu_ledger_events", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_ledger_events_previous_card")
        batch_op.drop_index("ix_gpu_ledger_events_node_at")
        batch_op.drop_index("ix_gpu_ledger_events_card_at")

    op.drop_table("gpu_ledger_events")
    with op.batch_alter_table("gpu_cards", schema=None) as batch_op:
        batch_op.drop_index("ix_gpu_cards_uuid")
        batch_op.drop_index("ix_gpu_cards_serial")
        batch_op.drop_index("ix_gpu_cards_node_slot")

    op.drop_table("gpu_cards")
