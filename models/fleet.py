"""Fleet incidents: one fault family on many nodes at once, or a tripped cordon breaker, as pure
decisions over an incident of component `fleet`.

- `fleet_fingerprint` is the incident key: `v2:` over ("fleet", cluster, component id), where the
  component id is the fault family, or `breaker` for a breaker trip.
- `fleet_change` decides what a fleet burst does to the cluster's fleet incident of its family:
  open one, add the nodes that joined, or resolve a burst that ended and open a new one.
- `breaker_incident` is the fleet incident a breaker trip raises.
- `fleet_actions` are the action requests of a fleet incident's change: its ticket and its one
  message to the infrastructure channel, never a cordon (a fleet incident names no node).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Literal

from models.identity import incident_fingerprint
from models.incidents import ActionRequest, IncidentChange, IncidentState, new_incident_id
from models.stream_policy import PipelinePolicy

FLEET = "fleet"  # the component, the category and the `gpu` column of every fleet incident
BREAKER = "breaker"  # the component id of the fleet incident a breaker trip raises


def fleet_fingerprint(cluster: str, component_id: str) -> str:
    """`v2:<16 hex>` over ("fleet", cluster, component id) (`models.identity.incident_fingerprint`)."""
    return incident_fingerprint(FLEET, cluster, component_id)


def _fresh(cluster: str, component_id: str, family: str, nodes: Sequence[str], codes: Sequence[str],
           at: datetime, first_seen: datetime, reason: str, previous: str | None) -> IncidentState:
    fp = fleet_fingerprint(cluster, component_id)
    return IncidentState(
        incident_id=new_incident_id(fp, at), fingerprint=fp, node=cluster, gpu=FLEET, family=family,
        status="open", count=len(set(nodes)), first_seen=first_seen, last_seen=at, category=FLEET, reason=reason,
        codes=tuple(dict.fromkeys(codes)), previous_incident_id=previous,
    )


def fleet_change(current: IncidentState | None, current_nodes: Sequence[str], *, cluster: str, family: str,
                 nodes: Sequence[str], codes: Sequence[str], at: datetime, reason: str,
                 policy: PipelinePolicy, first_seen: datetime | None = None) -> IncidentChange | None:
    """What a burst of `family` on `nodes` (counted over the fleet window ending at `at`, `reason`
    from `models.incidents.fleet_burst`) does to the cluster's latest fleet incident of the family
    (`current`, spanning `current_nodes`).

    No open incident: one opens (linked to the previous one). An open incident whose last fault is
    older than the fleet window belonged to a burst that ended: it is resolved and a new one opens.
    Otherwise new nodes join it (`updated`), and a burst that adds no node changes nothing (None).
    `count` is the number of nodes; `first_seen`, the burst's first fault (default: the window's start)."""
    window = timedelta(seconds=policy.fleet_window_s)
    since = at - window
    if current is not None and current.status == "open" and current.last_seen >= since:
        joined = sorted(set(current_nodes) | set(nodes))
        merged_codes = tuple(dict.fromkeys((*current.codes, *codes)))
        if joined == sorted(set(current_nodes)) and merged_codes == current.codes:
            return None
        added = sorted(set(joined) - set(current_nodes))
        why = f"{', '.join(added)} joined: {reason}" if added else f"new codes: {reason}"
        updated = replace(current, count=len(joined), last_seen=max(current.last_seen, at), codes=merged_codes,
                          reason=reason)
        return IncidentChange("updated", updated, why)
    previous = current.incident_id if current is not None else None
    fresh = _fresh(cluster, family, family, nodes, codes, at, first_seen or since, reason, previous)
    if current is not None and current.status == "open":
        resolved = replace(current, status="resolved", resolved_at=current.last_seen + window)
        return IncidentChange("reopened", fresh, f"a new burst after the fleet window: {reason}",
                              resolved_previous=resolved)
    if current is not None:
        return IncidentChange("reopened", fresh, f"the burst recurs after incident {previous} was resolved: {reason}")
    return IncidentChange("opened", fresh, reason)


def fleet_quiet(current: IncidentState, last_activity: datetime, now: datetime,
                policy: PipelinePolicy) -> IncidentChange | None:
    """Resolve an open fleet incident when no fault of its family arrived for the fleet window."""
    if current.status != "open":
        return None
    quiet = (now - last_activity).total_seconds()
    if quiet < policy.fleet_window_s:
        return None
    return IncidentChange("resolved", replace(current, status="resolved", resolved_at=now),
                          f"no new fault of {current.family} for {quiet:.0f} s (fleet window "
                          f"{policy.fleet_window_s:.0f} s)")


def breaker_incident(*, cluster: str, at: datetime, pool: str, reason: str, family: str, nodes: Sequence[str],
                     codes: Sequence[str], previous: str | None) -> IncidentState:
    """The fleet incident a breaker trip at `at` raises: keyed by the trip's time, so a redelivered
    trip names the same incident. `nodes`: the nodes xidpipe cordoned in the breaker's window and
    the node whose cordon the breaker held; `count` is their number."""
    shown = ", ".join(sorted(set(nodes)))
    where = f"pool {pool}" if pool else "the cluster"
    why = f"cordon circuit breaker tripped in {where}: {reason}; nodes: {shown}"
    return _fresh(cluster, BREAKER, family, nodes, codes, at, at, why, previous)


def fleet_actions(change: IncidentChange) -> list[ActionRequest]:
    """The action requests of a fleet incident's change: on opening (or reopening) its ticket and its
    message to the infrastructure channel, on resolution the message's update; a new node joining
    changes the incident (its messages on the incidents topic) but sends no second message. Never a
    cordon candidate: a fleet incident is no node's."""
    inc = change.incident

    def req(kind: Literal["ticket", "notification"], operation: str) -> ActionRequest:
        return ActionRequest(kind, operation, inc.incident_id, inc.node, inc.gpu, change.reason,
                             f"{inc.incident_id}:{kind}:{operation}")

    if change.kind in ("opened", "reopened"):
        return [req("ticket", "create" if change.kind == "opened" else "reopen"), req("notification", change.kind)]
    if change.kind == "resolved":
        return [req("notification", "resolved")]
    return []
