"""GPU fault rates that say no more than the data: per incident, over the span the history covers.

A rate is the incidents of component `gpu` per GPU over the **observed span**: from `--since` (or the
history's first record) to its last. It is never stretched past that span: one day of data is "0.57
incidents per GPU in 1 day", not "17 per 30 days". The rate per 30 days is given only when the span
is 30 days or longer, where it is a mean over what was seen rather than a guess about what was not.

The mean time between incidents is one GPU's span from its first incident's start to its last's,
divided by its incidents less one, pooled over the GPUs with two or more (a storm of lines is one
incident, so it cannot drag the mean down to the spacing of its lines).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

RATE_DAYS = 30.0  # the rate per this many days is given for a span at least this long


@dataclass(frozen=True, slots=True)
class Span:
    """The time the history observed: what a rate is measured over."""

    start: datetime
    end: datetime

    @property
    def days(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds() / 86400)


@dataclass(frozen=True, slots=True)
class GpuRate:
    gpus: int
    incidents: int
    incidents_per_gpu: float | None  # over the span
    incidents_per_gpu_per_30d: float | None  # None: the span is shorter than 30 days, see `why_no_30d`
    mean_time_between_incidents_s: float | None

    def as_dict(self) -> dict[str, int | float | None]:
        return {"gpus": self.gpus, "incidents": self.incidents, "incidents_per_gpu": self.incidents_per_gpu,
                "incidents_per_gpu_per_30d": self.incidents_per_gpu_per_30d,
                "mean_time_between_incidents_s": self.mean_time_between_incidents_s}


def gpu_rate(gpus: int, times: Mapping[str, Sequence[datetime]], span: Span) -> GpuRate:
    """`gpus` GPUs whose incidents started at `times` (by GPU), over `span`."""
    n = sum(len(t) for t in times.values())
    between = sum((max(t) - min(t)).total_seconds() for t in times.values() if len(t) > 1)
    gaps = sum(len(t) - 1 for t in times.values() if len(t) > 1)
    per_gpu = round(n / gpus, 3) if gpus else None
    per_30d = round(n / gpus / (span.days / RATE_DAYS), 3) if gpus and span.days >= RATE_DAYS else None
    return GpuRate(gpus=gpus, incidents=n, incidents_per_gpu=per_gpu, incidents_per_gpu_per_30d=per_30d,
                   mean_time_between_incidents_s=round(between / gaps, 1) if gaps else None)


def why_no_30d(span: Span) -> str | None:
    """Why there is no rate per 30 days (None when there is one)."""
    if span.days >= RATE_DAYS:
        return None
    return f"the history covers {describe_days(span.days)}, less than {RATE_DAYS:g} days: no rate per 30 days"


def describe_days(days: float) -> str:
    """`14.2 hours`, `3.5 days`, `45 days`: a span as people say it."""
    if days < 1:
        hours = days * 24
        return f"{hours:.1f} hours" if hours >= 1 else f"{hours * 60:.0f} minutes"
    return f"{days:.1f} days" if days < 10 else f"{days:.0f} days"
