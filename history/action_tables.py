"""SQL tables of the action record (`respond.cordon.action_log.SqlActionStore`; no engine here).

- `actions`: one row per action xidpipe executed or decided (cordon, repeat, release, evict,
  breaker trip or reset), with its outcome, node, incident, decision, reason and actor.
- `cordon_breaker`: one row (id 1), the cordon circuit breaker's state as JSON.
- `pending_cordons`: one row per incident whose cordon the responder must offer again (a retryable
  failure, due at `due_at`; or held by the tripped breaker), until it is settled.

Times are timezone-aware on PostgreSQL and naive UTC on SQLite (the store converts them). The
tables are on `history.tables.metadata`; migration 0004 creates the first two, 0006 `pending_cordons`.
"""

from __future__ import annotations

import sqlalchemy as sa

from history.tables import UtcDateTime, metadata

actions_table = sa.Table(
    "actions",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("node", sa.String(253)),
    sa.Column("incident_id", sa.String(512)),
    sa.Column("decision", sa.String(32)),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("dry_run", sa.Boolean, nullable=False, default=False),
    sa.Column("actor", sa.String(253), nullable=False),
    sa.Column("details", sa.JSON, nullable=False),
    sa.Index("ix_actions_action_at", "action", "at"),
    sa.Index("ix_actions_node_at", "node", "at"),
)

breaker_table = sa.Table(
    "cordon_breaker",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # always 1
    sa.Column("state", sa.JSON, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

pending_cordons_table = sa.Table(
    "pending_cordons",
    metadata,
    sa.Column("incident_id", sa.String(512), primary_key=True),
    sa.Column("node", sa.String(253), nullable=False),
    sa.Column("kind", sa.String(16), nullable=False),  # retry | breaker
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("due_at", UtcDateTime(timezone=True), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("updated_at", UtcDateTime(timezone=True), nullable=False),
    sa.Index("ix_pending_cordons_kind_due", "kind", "due_at"),
)
