"""Fleet incidents: one fault family on many nodes at once, or a tripped cordon breaker, as pure
decisions over an incident of component `fleet`.

- `fleet_fingerprint` is the incident key: `v2:` over ("fleet", cluster, component id), where the
  component id is the fault family, or `breaker` for a breaker trip.
- `fleet_bursts_around` decides, in event time, which bursts faults belong to: some window of
  `fleet_window_s` that holds one of them holds faults of the family on `fleet_min_nodes` nodes;
  bursts more than a fleet window apart are separate. It depends on the faults alone, not on which
  batch read which of them.
- `fleet_reach` and `fleet_absorbed`: a fleet incident takes every fault of its family within one
  fleet window of its own faults, whenever that fault is read (resolved or not).
- `fleet_target` places a burst among the family's incidents in event time: in the one whose reach
  it overlaps, after the latest, or before a later one (a burst read late); `fleet_change` decides
  what it does there: open an incident, add the nodes that joined, or resolve a burst that ended
  and open a new one; `past_fleet_incident` is a burst read after a later one, over already.
- `breaker_incident` is the fleet incident a breaker trip raises.

A fleet incident's changes make their action requests as every incident's do (`models.actions`):
its ticket and its one message to the infrastructure channel, never a cordon (it names no node).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from models.identity import incident_fingerprint
from models.incidents import IncidentChange, IncidentState, fleet_burst, new_incident_id
from models.stream_policy import PipelinePolicy
from models.vocabulary import Category, ComponentKind

FLEET = ComponentKind.FLEET  # the component and the `gpu` column of every fleet incident; its category is FLEET too
BREAKER = "breaker"  # the component id of the fleet incident a breaker trip raises


def fleet_fingerprint(cluster: str, component_id: str) -> str:
    """`v2:<16 hex>` over ("fleet", cluster, component id) (`models.identity.incident_fingerprint`)."""
    return incident_fingerprint(FLEET, cluster, component_id)


def _fresh(cluster: str, component_id: str, family: str, nodes: Sequence[str], codes: Sequence[str],
           at: datetime, first_seen: datetime, reason: str, previous: str | None) -> IncidentState:
    fp = fleet_fingerprint(cluster, component_id)
    return IncidentState(
        incident_id=new_incident_id(fp, at), fingerprint=fp, node=cluster, gpu=FLEET, family=family,
        status="open", count=len(set(nodes)), first_seen=first_seen, last_seen=at, category=Category.FLEET,
        reason=reason, codes=tuple(dict.fromkeys(codes)), previous_incident_id=previous, component=ComponentKind.FLEET,
        component_id=component_id,
    )


@dataclass(frozen=True, slots=True)
class FleetFault:
    """One fault of a fleet family as the fleet count reads it: its node, code and event time."""

    node: str
    code: str
    at: datetime


@dataclass(frozen=True, slots=True)
class FleetBurst:
    """Faults of one family that belong to a fleet incident: their nodes, codes, event-time span and
    the reason (`models.incidents.fleet_burst` over the nodes)."""

    nodes: tuple[str, ...]
    codes: tuple[str, ...]
    first: datetime
    last: datetime
    reason: str


def fleet_bursts_around(family: str, faults: Sequence[FleetFault], around: Sequence[datetime],
                        policy: PipelinePolicy) -> list[FleetBurst]:
    """The bursts that faults of `family` at the event times `around` belong to, counted over `faults`
    (the family's faults within one fleet window of them, those included), in time order: the faults
    of every window of `fleet_window_s` that holds one of `around` and faults on `fleet_min_nodes` nodes
    or more, cut where two of them are more than a fleet window apart (no incident's reach joins them).

    Only the faults decide, not the order they were read in: a window holds enough nodes once its
    last fault is stored, and the count around that fault finds it. A window that holds a fault at `t`
    can be slid to start at its first fault, so the windows starting at each fault are enough."""
    window = timedelta(seconds=policy.fleet_window_s)
    ordered = sorted(faults, key=lambda f: (f.at, f.node, f.code))
    times = sorted(around)
    # The windows' faults, in order: each qualifying window [start, end) adds what the ones before it
    # did not (the ends never move back), so every fault is visited once.
    members: list[FleetFault] = []
    in_window: Counter[str] = Counter()
    end = taken = 0
    for start, f in enumerate(ordered):
        while end < len(ordered) and ordered[end].at <= f.at + window:
            in_window[ordered[end].node] += 1
            end += 1
        k = bisect_left(times, f.at)
        holds_one = k < len(times) and times[k] <= f.at + window
        if holds_one and len(in_window) >= policy.fleet_min_nodes:
            members.extend(ordered[max(start, taken):end])
            taken = end
        in_window[f.node] -= 1
        if not in_window[f.node]:
            del in_window[f.node]
    parts: list[list[FleetFault]] = []
    for f in members:
        if parts and f.at - parts[-1][-1].at <= window:
            parts[-1].append(f)
        else:
            parts.append([f])
    return [b for part in parts if (b := _burst(family, part, policy)) is not None]


def _burst(family: str, faults: Sequence[FleetFault], policy: PipelinePolicy,
           nodes: Sequence[str] = ()) -> FleetBurst | None:
    """`faults` as a burst whose reason counts their nodes and `nodes` (None: no fault, or too few nodes)."""
    if not faults:
        return None
    reason = fleet_burst(family, [*nodes, *(f.node for f in faults)], policy)
    if reason is None:
        return None
    return FleetBurst(tuple(sorted({f.node for f in faults})), tuple(sorted({f.code for f in faults if f.code})),
                      min(f.at for f in faults), max(f.at for f in faults), reason)


def fleet_reach(current: IncidentState, policy: PipelinePolicy) -> tuple[datetime, datetime]:
    """The event-time span whose faults of its family a fleet incident takes (open or resolved): one
    fleet window either side of its first and last fault."""
    window = timedelta(seconds=policy.fleet_window_s)
    return current.first_seen - window, current.last_seen + window


def fleet_absorbed(current: IncidentState, current_nodes: Sequence[str], faults: Sequence[FleetFault],
                   policy: PipelinePolicy) -> FleetBurst | None:
    """The faults of `faults` (of the incident's family) that the fleet incident `current` (spanning
    `current_nodes`) takes, whenever they were read: those within its reach (`fleet_reach`). No count of
    its own: the incident's nodes made the burst already. None when there is none."""
    lo, hi = fleet_reach(current, policy)
    return _burst(current.family, [f for f in faults if lo <= f.at <= hi], policy, current_nodes)


Placement = Literal["join", "after", "before"]


def fleet_target(burst: FleetBurst, incidents: Sequence[IncidentState],
                 policy: PipelinePolicy) -> tuple[Placement, IncidentState | None]:
    """Where a burst goes among the family's fleet incidents (`incidents`: every one whose reach ends
    after the burst's window starts, and the latest before them), in event time, whatever their status
    and whichever was read first: `join` the earliest whose reach (`fleet_reach`) its span overlaps;
    else `after` the latest, which it follows (None: the family's first); else, a burst read after a
    later one, `before` it, following the latest of those before (None: none)."""
    window = timedelta(seconds=policy.fleet_window_s)
    overlapping = [i for i in incidents if i.first_seen - window <= burst.last and burst.first <= i.last_seen + window]
    if overlapping:
        return "join", min(overlapping, key=lambda i: (i.first_seen, i.incident_id))
    before = [i for i in incidents if i.last_seen < burst.first]
    previous = max(before, key=lambda i: (i.last_seen, i.incident_id)) if before else None
    if any(i.first_seen > burst.last for i in incidents):
        return "before", previous
    return "after", previous


def fleet_joined(current: IncidentState, current_nodes: Sequence[str], *, family: str, burst: FleetBurst,
                 policy: PipelinePolicy) -> IncidentChange | None:
    """The nodes, codes and times of `burst` join the fleet incident `current` (spanning `current_nodes`),
    open or resolved (a burst read late is still its): `updated`, its count the number of nodes; None
    when the burst adds no node, code or time."""
    joined = sorted(set(current_nodes) | set(burst.nodes))
    merged_codes = tuple(dict.fromkeys((*current.codes, *burst.codes)))
    first, last = min(current.first_seen, burst.first), max(current.last_seen, burst.last)
    added = sorted(set(joined) - set(current_nodes))
    if not added and merged_codes == current.codes and (first, last) == (current.first_seen, current.last_seen):
        return None
    reason = fleet_burst(family, joined, policy) or burst.reason
    why = f"{', '.join(added)} joined: {reason}" if added else f"new codes or times: {reason}"
    updated = replace(current, count=len(joined), first_seen=first, last_seen=last, codes=merged_codes,
                      reason=reason)
    return IncidentChange("updated", updated, why)


def fleet_change(current: IncidentState | None, current_nodes: Sequence[str], *, cluster: str, family: str,
                 burst: FleetBurst, policy: PipelinePolicy) -> IncidentChange | None:
    """What `burst` (`fleet_bursts_around`, `fleet_absorbed`) does to the cluster's latest fleet
    incident of the family (`current`, spanning `current_nodes`).

    No open incident: one opens (linked to the previous one). A burst that starts more than a fleet
    window after the open incident's last fault is a new one: the open incident is resolved and a new
    one opens. Otherwise the burst's nodes join it (`fleet_joined`)."""
    window = timedelta(seconds=policy.fleet_window_s)
    if current is not None and current.status == "open" and burst.first <= current.last_seen + window:
        return fleet_joined(current, current_nodes, family=family, burst=burst, policy=policy)
    previous = current.incident_id if current is not None else None
    fresh = _fresh(cluster, family, family, burst.nodes, burst.codes, burst.last, burst.first, burst.reason,
                   previous)
    if current is not None and current.status == "open":
        resolved = replace(current, status="resolved", resolved_at=current.last_seen + window)
        return IncidentChange("reopened", fresh, f"a new burst after the fleet window: {burst.reason}",
                              resolved_previous=resolved)
    if current is not None:
        return IncidentChange("reopened", fresh,
                              f"the burst recurs after incident {previous} was resolved: {burst.reason}")
    return IncidentChange("opened", fresh, burst.reason)


def past_fleet_incident(previous: IncidentState | None, *, cluster: str, family: str, burst: FleetBurst,
                        policy: PipelinePolicy) -> IncidentChange:
    """A burst read after a later one of its family (a node's records came late): an incident of its own,
    over already (resolved a fleet window after its last fault), following `previous`."""
    window = timedelta(seconds=policy.fleet_window_s)
    fresh = _fresh(cluster, family, family, burst.nodes, burst.codes, burst.last, burst.first, burst.reason,
                   previous.incident_id if previous is not None else None)
    return IncidentChange("opened", replace(fresh, status="resolved", resolved_at=burst.last + window),
                          f"{burst.reason} (read after a later burst of its family: over since "
                          f"{(burst.last + window).isoformat()})")


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
