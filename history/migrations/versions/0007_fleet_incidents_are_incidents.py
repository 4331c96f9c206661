"""fleet incidents are incidents

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

A fleet incident (one fault family on many nodes at once, or a tripped cordon breaker) is an
incident of component `fleet` on the cluster: `component_id` is the family (or `breaker`), `gpu`
is `fleet`, `category` is `fleet`, `count` is its number of nodes and the new column
`incidents.nodes` lists them. The rows of `fleet_incidents` move into `incidents` with the
fingerprint `models.fleet.fleet_fingerprint` gives them, and the table is dropped. The downgrade
moves the burst incidents back (breaker incidents have no place there and are dropped).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

import history.tables

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_FLEET = sa.table(
    "fleet_incidents", sa.column("fleet_id", sa.String), sa.column("cluster", sa.String),
    sa.column("family", sa.String), sa.column("status", sa.String), sa.column("reason", sa.Text),
    sa.column("nodes", sa.JSON), sa.column("first_seen", history.tables.UtcDateTime(timezone=True)),
    sa.column("last_seen", history.tables.UtcDateTime(timezone=True)),
    sa.column("updated_at", history.tables.UtcDateTime(timezone=True)),
    sa.column("resolved_at", history.tables.UtcDateTime(timezone=True)),
)
_INCIDENT_COLUMNS = (
    "incident_id", "fingerprint", "node", "gpu", "family", "status", "lifecycle", "category", "reason", "count",
    "first_seen", "last_seen", "opened_at", "updated_at", "resolved_at", "codes", "pods", "processes", "workloads",
    "cordon_requested", "version", "component", "component_id", "nodes",
)
_INCIDENTS = sa.table(
    "incidents", *(sa.column(c, history.tables.UtcDateTime(timezone=True)) if c.endswith(("_seen", "_at"))
                   else sa.column(c, sa.JSON) if c in ("codes", "pods", "processes", "workloads", "nodes")
                   else sa.column(c) for c in _INCIDENT_COLUMNS),
)


def _fingerprint(cluster: str, family: str) -> str:
    """`models.fleet.fleet_fingerprint` as of this revision."""
    payload = "\x1f".join(("fleet", cluster, family)).encode("utf-8")
    return f"v2:{hashlib.sha256(payload).hexdigest()[:16]}"


def _nodes(value: Any) -> list[str]:
    if isinstance(value, str):
        value = json.loads(value)
    return sorted({str(n) for n in value or []})


def _incident(r: Any) -> dict[str, Any]:
    fp = _fingerprint(r.cluster, r.family)
    first: datetime = r.first_seen
    nodes = _nodes(r.nodes)
    return {
        "incident_id": f"{fp}@{first.strftime('%Y%m%dT%H%M%S.%fZ')}", "fingerprint": fp, "node": r.cluster,
        "gpu": "fleet", "family": r.family, "status": r.status, "lifecycle": "open", "category": "fleet",
        "reason": r.reason, "count": len(nodes), "first_seen": first, "last_seen": r.last_seen,
        "opened_at": first, "updated_at": r.updated_at, "resolved_at": r.resolved_at, "codes": [], "pods": [],
        "processes": [], "workloads": [], "cordon_requested": False, "version": 1, "component": "fleet",
        "component_id": r.family, "nodes": nodes,
    }


def upgrade() -> None:
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.add_column(sa.Column("nodes", sa.JSON(), nullable=True))
    conn = op.get_bind()
    rows = [_incident(r) for r in conn.execute(sa.select(_FLEET).order_by(_FLEET.c.first_seen))]
    if rows:
        conn.execute(sa.insert(_INCIDENTS), rows)
    with op.batch_alter_table("fleet_incidents", schema=None) as batch_op:
        batch_op.drop_index("uq_fleet_open", postgresql_where=sa.text("status = 'open'"),
                            sqlite_where=sa.text("status = 'open'"))
    op.drop_table("fleet_incidents")


def downgrade() -> None:
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
        batch_op.create_index("uq_fleet_open", ["cluster", "family"], unique=True,
                              postgresql_where=sa.text("status = 'open'"), sqlite_where=sa.text("status = 'open'"))
    conn = op.get_bind()
    fleet = _INCIDENTS.c
    bursts = conn.execute(sa.select(_INCIDENTS).where(fleet.component == "fleet", fleet.component_id != "breaker")
                          .order_by(fleet.first_seen)).all()
    rows = [{"fleet_id": f"fleet:{r.node}:{r.family}@{r.first_seen.strftime('%Y%m%dT%H%M%S.%fZ')}"[:160],
             "cluster": r.node, "family": r.family, "status": r.status, "reason": r.reason,
             "nodes": _nodes(r.nodes), "first_seen": r.first_seen, "last_seen": r.last_seen,
             "updated_at": r.updated_at, "resolved_at": r.resolved_at} for r in bursts]
    if rows:
        conn.execute(sa.insert(_FLEET), rows)
    conn.execute(sa.delete(_INCIDENTS).where(fleet.component == "fleet"))
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_column("nodes")
