"""Every table of xidpipe's database, on one `MetaData`: what the migrations build.

`history.tables` (the stream pipeline, the incident history and the GPU ledger),
`history.sink_tables` (tickets, chat notifications, silences), `history.action_tables` (the
action record and the cordon breaker) and `history.remediation_tables` (the remediation loops, their
attempts and transitions, the GPU ledger's RMAs) declare their tables on `history.tables.metadata`; importing
this module registers all of them. It is the Alembic target (`history/migrations/env.py`).
"""

from __future__ import annotations

from history import action_tables, remediation_tables, sink_tables
from history.tables import POSTGRESQL_ONLY_INDEXES, metadata

__all__ = ["POSTGRESQL_ONLY_INDEXES", "action_tables", "metadata", "remediation_tables", "sink_tables"]
