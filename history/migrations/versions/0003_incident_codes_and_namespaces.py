"""incident codes and namespaces: one row each, for the history's Xid and namespace filters

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

Counting the incidents that saw one Xid, or hit one namespace, through the fault events meant
visiting every matching event (hundreds of thousands for the common Xids of a large fleet).
`incident_codes` and `incident_namespaces` hold each incident's distinct codes and namespaces,
kept by the worker, so the count and the page read `(xid, incident_id)` and
`(namespace, incident_id)`. Existing incidents are filled from their `codes` list and their
fault events. The (xid | namespace, incident_id) indexes on `fault_events` that served those
filters before are dropped: every fault the worker writes no longer maintains them.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_BATCH = 5000


def xid_of(code: str) -> int | None:
    kind, _, number = code.partition(" ")
    return int(number) if kind == "Xid" and number.isdigit() else None


def upgrade() -> None:
    op.create_table(
        "incident_codes",
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("code", sa.String(length=64), nullable=False),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("incident_id", "code"),
    )
    with op.batch_alter_table("incident_codes", schema=None) as batch_op:
        batch_op.create_index("ix_incident_codes_xid_incident", ["xid", "incident_id"], unique=False)

    op.create_table(
        "incident_namespaces",
        sa.Column("incident_id", sa.String(length=128), nullable=False),
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.PrimaryKeyConstraint("incident_id", "namespace"),
    )
    with op.batch_alter_table("incident_namespaces", schema=None) as batch_op:
        batch_op.create_index("ix_incident_namespaces_namespace_incident", ["namespace", "incident_id"],
                              unique=False)
    op.execute("INSERT INTO incident_namespaces (incident_id, namespace) SELECT DISTINCT incident_id, namespace "
               "FROM fault_events WHERE incident_id IS NOT NULL AND namespace IS NOT NULL")

    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.drop_index("ix_fault_events_xid_incident")
        batch_op.drop_index("ix_fault_events_namespace_incident")

    conn = op.get_bind()
    codes = sa.table("incident_codes", sa.column("incident_id"), sa.column("code"), sa.column("xid"))
    rows: list[dict[str, object]] = []
    for incident_id, listed in conn.execute(sa.text("SELECT incident_id, codes FROM incidents")):
        values = json.loads(listed) if isinstance(listed, str) else (listed or [])
        for code in dict.fromkeys(str(c)[:64] for c in values):
            rows.append({"incident_id": incident_id, "code": code, "xid": xid_of(code)})
        if len(rows) >= _BATCH:
            conn.execute(codes.insert(), rows)
            rows = []
    if rows:
        conn.execute(codes.insert(), rows)


def downgrade() -> None:
    with op.batch_alter_table("fault_events", schema=None) as batch_op:
        batch_op.create_index("ix_fault_events_namespace_incident", ["namespace", "incident_id"], unique=False)
        batch_op.create_index("ix_fault_events_xid_incident", ["xid", "incident_id"], unique=False)
    with op.batch_alter_table("incident_namespaces", schema=None) as batch_op:
        batch_op.drop_index("ix_incident_namespaces_namespace_incident")
    op.drop_table("incident_namespaces")
    with op.batch_alter_table("incident_codes", schema=None) as batch_op:
        batch_op.drop_index("ix_incident_codes_xid_incident")
    op.drop_table("incident_codes")
