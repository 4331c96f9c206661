"""The history's side of the fleet reliability figures (`models.reliability.fleet_reliability`): the
hardware incidents (of a GPU, an NVSwitch or a node; not an application's, not the fleet's) with
where and when they began and were resolved, and each node's pool as the history last recorded it.

A node's pool is the pool label's value the responder read when it decided on the node: its latest
cordon decision's action record, remediation loop or breaker trip. Nodes xidpipe never decided on
(no incident of theirs asked for a cordon decision) are in the pool ''."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.action_tables import actions_table
from history.remediation_tables import remediation_loops_table as loops_t
from history.tables import Incident
from models.ledger import card_key
from models.reliability import HARDWARE_COMPONENTS, IncidentSpan, fleet_reliability


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def incident_spans(s: Session, since: datetime | None = None) -> list[IncidentSpan]:
    """The hardware incidents that began at or after `since` (all without it), merged ones left out."""
    q = (sa.select(Incident.node, Incident.serial, Incident.gpu_uuid, Incident.first_seen, Incident.resolved_at)
         .where(Incident.merged_into.is_(None), Incident.component.in_(HARDWARE_COMPONENTS),
                Incident.category != "application"))
    if since is not None:
        q = q.where(Incident.first_seen >= since)
    return [IncidentSpan(node=str(node), card=card_key(serial, uuid) if uuid else None, started=_utc(first),
                         resolved=_utc(resolved) if resolved is not None else None)
            for node, serial, uuid, first, resolved in s.execute(q)]


# The action records that carry the node's pool in their details: a cordon or quarantine decision's
# (`respond.cordon.executor`, every decision, a `not_needed` too) and a breaker trip's.
POOL_ACTIONS = ("cordon", "repeat", "quarantine", "breaker_trip")


def node_pools(s: Session) -> dict[str, str]:
    """Each node's pool, the latest the history recorded: a remediation loop's, or an action's."""
    seen: list[tuple[datetime, str, str]] = []
    for node, pool, at in s.execute(sa.select(loops_t.c.node, loops_t.c.pool, loops_t.c.updated_at)):
        seen.append((_utc(at), str(node), str(pool)))
    acted = sa.select(actions_table.c.node, actions_table.c.details, actions_table.c.at).where(
        actions_table.c.action.in_(POOL_ACTIONS), actions_table.c.node.is_not(None))
    for node, details, at in s.execute(acted):
        if isinstance(details, dict) and isinstance(details.get("pool"), str):
            seen.append((_utc(at), str(node), details["pool"]))
    return {node: pool for _, node, pool in sorted(seen)}


def reliability(s: Session, since: datetime | None = None, top: int | None = 10) -> dict[str, Any]:
    """`fleet_reliability` of the hardware incidents since `since`, nodes in their recorded pools."""
    return fleet_reliability(incident_spans(s, since), node_pools(s), top)
