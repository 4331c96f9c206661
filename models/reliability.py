"""Reliability figures per node and per card, pure: mean time to repair (MTTR: from an incident's
first fault to its return to service after validation) and mean time between incidents (MTBI: the
mean gap between the starts of consecutive incidents). NVSentinel keeps MTBI per node (its ADR-044);
xidpipe keeps both per node and per card, from the history.

`fleet_reliability` gives the figures the SRE reports on (`xidpipe stats`, `/api/v1/stats`, the
reliability page): per node, per card and per pool, the mean time to resolve an incident (its first
fault to its resolution) and the mean time between incidents.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


def mean_time_to_repair(repairs: Iterable[tuple[str, datetime, datetime]]) -> dict[str, float]:
    """Per key, the mean seconds from the first fault to the return, of (key, first fault, returned)."""
    spans: dict[str, list[float]] = defaultdict(list)
    for key, start, returned in repairs:
        if key and returned >= start:
            spans[key].append((returned - start).total_seconds())
    return {k: sum(v) / len(v) for k, v in spans.items()}


def mean_time_between(starts: Mapping[str, Iterable[datetime]]) -> dict[str, float]:
    """Per key, the mean seconds between consecutive incident starts (keys with fewer than two left out)."""
    out: dict[str, float] = {}
    for key, times in starts.items():
        ordered = sorted(times)
        if key and len(ordered) >= 2:
            out[key] = (ordered[-1] - ordered[0]).total_seconds() / (len(ordered) - 1)
    return out


# --- fleet figures: per node, per card and per pool, from the incidents themselves ----------------------

# The incidents the figures count: a GPU's, an NVSwitch's or a node's, not an application's (the
# workload's fault, not the hardware's) nor the fleet's (a burst over many nodes).
HARDWARE_COMPONENTS = ("gpu", "nvswitch", "node")


def counts_for_reliability(component: str | None, category: str | None) -> bool:
    return component in HARDWARE_COMPONENTS and category != "application"


def _instant(value: Any) -> datetime | None:
    """A time of an incident's message (ISO 8601; UTC when it names no zone)."""
    try:
        at = value if isinstance(value, datetime) else datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return at.replace(tzinfo=UTC) if at is not None and at.tzinfo is None else at


def time_to_resolve(incident: Mapping[str, Any]) -> float | None:
    """Seconds from a resolved hardware incident's first fault to its resolution (an incident as the
    incidents topic carries it); None for any other incident."""
    if not counts_for_reliability(incident.get("component"), incident.get("category")):
        return None
    start, end = _instant(incident.get("first_seen")), _instant(incident.get("resolved_at"))
    if start is None or end is None or end < start:
        return None
    return (end - start).total_seconds()


@dataclass(frozen=True, slots=True)
class IncidentSpan:
    """One incident as the figures see it: where (node, card: serial or UUID, None for a node's or
    NVSwitch's), when it began (its first fault) and when it was resolved (None while open)."""

    node: str
    card: str | None
    started: datetime
    resolved: datetime | None


def figures(spans: Sequence[IncidentSpan]) -> dict[str, Any]:
    """The figures of one group of incidents: how many, how many resolved, the mean time to resolve
    (first fault to resolution, over the resolved ones) and the mean time between incidents (between
    consecutive starts; None with fewer than two)."""
    spent = [(sp.resolved - sp.started).total_seconds() for sp in spans
             if sp.resolved is not None and sp.resolved >= sp.started]
    between = mean_time_between({"all": [sp.started for sp in spans]}).get("all")
    return {"incidents": len(spans), "resolved": len(spent),
            "mean_time_to_resolve_s": round(sum(spent) / len(spent), 3) if spent else None,
            "mean_time_between_incidents_s": None if between is None else round(between, 3)}


def _grouped(spans: Iterable[IncidentSpan], key: Callable[[IncidentSpan], str | None],
             top: int | None) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[IncidentSpan]] = defaultdict(list)
    for sp in spans:
        k = key(sp)
        if k is not None:
            groups[k].append(sp)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return {k: figures(v) for k, v in ordered[:top]}


def fleet_reliability(spans: Sequence[IncidentSpan], pools: Mapping[str, str], top: int | None = None
                      ) -> dict[str, Any]:
    """The figures over all `spans`, per pool (a node's pool from `pools`, '' when unknown), per node and
    per card (the `top` with the most incidents; every pool). A pool's time between incidents is between
    any two consecutive incidents of its nodes: how often the pool as a whole is hit."""
    return {"all": figures(spans),
            "by_pool": _grouped(spans, lambda sp: pools.get(sp.node, ""), None),
            "by_node": _grouped(spans, lambda sp: sp.node, top),
            "by_card": _grouped(spans, lambda sp: sp.card, top)}


def started_at(incident: Mapping[str, Any]) -> datetime | None:
    """When a hardware incident began (its first fault); None for any other incident."""
    if not counts_for_reliability(incident.get("component"), incident.get("category")):
        return None
    return _instant(incident.get("first_seen"))
