"""Reliability figures per node and per card, pure: mean time to repair (MTTR: from an incident's
first fault to its return to service after validation) and mean time between incidents (MTBI: the
mean gap between the starts of consecutive incidents). NVSentinel keeps MTBI per node (its ADR-044);
xidpipe keeps both per node and per card, from the history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime


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
