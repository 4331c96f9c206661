"""A GPU's recent history, as its readings carry it: pure functions the agent builds it with and the
decisions read it with.

The agent folds every poll of a clock minute into a `Bucket`; when the minute ends, its `Sample`
joins the minute history (the last `MINUTES_KEPT`), and every clock hour the hour's minutes merge
into one sample of the hour history (the last `HOURS_KEPT`). Counters are kept as the cumulative
value at a sample's end, so a window's count is the increase between samples (`increase`), a reset
counter (a driver reload clears the volatile ones) counting from zero again.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from models.signals.health.records import HealthHistory, HealthReading

MINUTE_S = 60
HOUR_S = 3600
MINUTES_KEPT = 60  # the last hour by the minute: every window of the policy fits in it
HOURS_KEPT = 24  # the last day by the hour: the single-bit baseline

# nvmlClocksEventReason* bits (nvml.h)
GPU_IDLE = 0x1
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
SLOWDOWN_REASONS = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE  # gpud's hw-slowdown set
THERMAL_REASONS = SW_THERMAL | HW_THERMAL
POWER_REASONS = SW_POWER_CAP | HW_POWER_BRAKE

COUNTERS = ("sbe", "nvlink_crc", "nvlink_replay", "pcie_replays")


@dataclass(frozen=True, slots=True)
class Sample:
    """What one span (a minute, an hour) of polls amounts to."""

    sbe: int | None = None
    nvlink_crc: int | None = None
    nvlink_replay: int | None = None
    pcie_replays: int | None = None
    reasons: int = 0
    margin_c: int | None = None
    power_pct: int | None = None
    busy_gen: int | None = None


def counters(r: HealthReading) -> dict[str, int | None]:
    """A reading's cumulative counters: corrected ECC errors (aggregate, else volatile), NVLink CRC and
    replay (with recovery) errors, PCIe replays."""
    ecc = r.ecc
    sbe = None if ecc is None else ecc.aggregate_corrected if ecc.aggregate_corrected is not None \
        else ecc.volatile_corrected
    links = r.nvlink_errors
    return {"sbe": sbe, "nvlink_crc": links.crc if links else None,
            "nvlink_replay": links.replays if links else None, "pcie_replays": r.pcie_replays}


def _lower(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _higher(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def power_pct(r: HealthReading) -> int | None:
    if r.power_mw is None or not r.power_limit_mw:
        return None
    return round(100 * r.power_mw / r.power_limit_mw)


def busy_gen(r: HealthReading) -> int | None:
    """The link generation while the GPU is not idle (None when idle or unknown)."""
    if r.pcie_gen is None or r.clocks_event_reasons is None or r.clocks_event_reasons & GPU_IDLE:
        return None
    return r.pcie_gen


@dataclass(slots=True)
class Bucket:
    """The polls of one span so far (mutable: the agent adds each poll)."""

    index: int  # the span's number: seconds since the epoch // its length
    sample: Sample = field(default_factory=Sample)
    polls: int = 0

    def add(self, r: HealthReading) -> None:
        s = self.sample
        values = counters(r)
        self.sample = Sample(
            **{k: values[k] if values[k] is not None else getattr(s, k) for k in COUNTERS},
            reasons=s.reasons | (r.clocks_event_reasons or 0),
            margin_c=_lower(s.margin_c, r.slowdown_margin_c),
            power_pct=_higher(s.power_pct, power_pct(r)),
            busy_gen=_lower(s.busy_gen, busy_gen(r)),
        )
        self.polls += 1


def merge(samples: Sequence[Sample]) -> Sample:
    """Several consecutive samples as one: the last counters, every reason, the extremes."""
    out = Sample()
    for s in samples:
        out = Sample(
            **{k: getattr(s, k) if getattr(s, k) is not None else getattr(out, k) for k in COUNTERS},
            reasons=out.reasons | s.reasons, margin_c=_lower(out.margin_c, s.margin_c),
            power_pct=_higher(out.power_pct, s.power_pct), busy_gen=_lower(out.busy_gen, s.busy_gen),
        )
    return out


_COLUMNS = ("sbe", "nvlink_crc", "nvlink_replay", "pcie_replays", "reasons", "margin_c", "power_pct", "busy_gen")


def append(h: HealthHistory, s: Sample, end: datetime, keep: int) -> HealthHistory:
    """The history with `s` (the span ending at `end`) as its newest sample, the oldest beyond `keep` dropped."""
    columns = {c: (*getattr(h, c), getattr(s, c))[-keep:] for c in _COLUMNS}
    return h.model_copy(update={"end": end, **columns})


def sample(h: HealthHistory, i: int) -> Sample:
    return Sample(**{c: getattr(h, c)[i] for c in _COLUMNS})


def last(h: HealthHistory, seconds: float) -> list[Sample]:
    """The samples of the newest `seconds` (whole samples: ceil(seconds / step))."""
    n = min(len(h), math.ceil(seconds / h.step_s))
    return [sample(h, i) for i in range(len(h) - n, len(h))]


def increase(values: Sequence[int | None]) -> int | None:
    """A cumulative counter's increase across consecutive values (a counter that went back was reset
    and counts from zero); None when fewer than two values are known."""
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return None
    total = 0
    for before, after in itertools.pairwise(known):
        total += after - before if after >= before else after
    return total


def window_increase(h: HealthHistory, column: str, seconds: float) -> tuple[int | None, float]:
    """A counter's increase over the newest `seconds` of `h` (from the end of the sample before them)
    and the seconds that covers; (None, 0) without two samples."""
    n = min(len(h) - 1, math.ceil(seconds / h.step_s))
    if n <= 0:
        return None, 0.0
    values: tuple[int | None, ...] = getattr(h, column)[-(n + 1):]
    return increase(values), float(n * h.step_s)
