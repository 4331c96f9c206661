"""Which GPUs xidpipe holds quarantined, from the action record (`actions`): a GPU's quarantine is the
newest of its rule's records that wrote or deleted it, a `quarantine` record whose decision wrote
the rule (`done`, or `dry_run` for a dry run's rule of effect None) or an `unquarantine` that deleted
it. The responder writes them (`respond.cordon.executor`, `respond.quarantine.release`); the
reconciliation records a rule that left the cluster otherwise, so this stays what the cluster holds.
The incident's dossier (ticket, page, `xidpipe incidents show`) and `xidpipe gpus list` read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.action_tables import actions_table

KINDS = ("quarantine", "unquarantine")


def active_quarantines(s: Session, *, nodes: Iterable[str] | None = None,
                       incident_id: str | None = None) -> dict[str, dict[str, Any]]:
    """The GPUs quarantined now (by UUID): rule, effect, device, node, incident, since and whether it
    is a dry run's; only on `nodes`, or only of `incident_id`, when given."""
    bind = s.get_bind()
    if not sa.inspect(bind).has_table("actions"):
        return {}
    t = actions_table
    q = sa.select(t.c.id, t.c.at, t.c.action, t.c.outcome, t.c.decision, t.c.node, t.c.incident_id, t.c.dry_run,
                  t.c.details).where(t.c.action.in_(KINDS), t.c.outcome.in_(("done", "dry_run"))).order_by(t.c.id)
    if nodes is not None:
        q = q.where(t.c.node.in_(list(nodes)))
    latest: dict[str, Any] = {}
    for row in s.execute(q):
        details = row.details or {}
        rule = details.get("rule")
        written = row.action == "unquarantine" or row.decision == "quarantine"
        if rule and written:
            latest[str(rule)] = row
    out: dict[str, dict[str, Any]] = {}
    for rule, row in latest.items():
        details = row.details or {}
        if row.action != "quarantine" or (incident_id is not None and row.incident_id != incident_id):
            continue
        at = row.at if row.at.tzinfo else row.at.replace(tzinfo=UTC)
        out[str(details.get("gpu", ""))] = {
            "rule": rule, "effect": details.get("effect"), "device": details.get("device"), "node": row.node,
            "incident_id": row.incident_id, "since": _iso(at), "dry_run": bool(row.dry_run),
        }
    return out


def quarantine_text(q: dict[str, Any]) -> str:
    """One line: what holds the GPU, since when, for which incident."""
    what = "dry run (effect None, nothing held)" if q.get("dry_run") else f"quarantined ({q.get('effect')})"
    return (f"{what}: DeviceTaintRule {q.get('rule')} on {q.get('device')}, since {q.get('since')}, "
            f"incident {q.get('incident_id')}")


def _iso(value: datetime) -> str:
    return value.isoformat()
