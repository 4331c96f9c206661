"""When each condition of a GPU began: the onsets a `GpuHealth` record carries in `since`.

A decision identifies the fault it reports by its condition's onset, so a condition that still
holds at the next record (a heartbeat, another change) is the same fault report, stored once,
and only a condition that ended and came back is a new one.

- A *state* (the recovery action, a remap pending, the set of NVLinks down, the PCIe width, ...)
  begins when its value last changed.
- An *activity* (a counter rising, hardware slowdown, a busy link below its generation) begins
  with the first minute it was seen after at least `QUIET_S` without it.

Pure: the agent keeps an `Episodes` per GPU and feeds it every poll and every closed minute.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from models.signals.health.history import COUNTERS, SLOWDOWN_REASONS, Sample
from models.signals.health.records import HealthReading

QUIET_S = 3600.0  # an activity is over after an hour without it (the minute history's length)

STATES = ("recovery_action", "remap_pending", "remap_failure", "retired_pending", "retired_pages", "nvlinks_down",
          "pcie_width", "fabric")
ACTIVITIES = (*COUNTERS, "slowdown", "pcie_gen")


def states(r: HealthReading) -> dict[str, Hashable]:
    """The reading's state conditions that it knows."""
    out: dict[str, Hashable] = {}
    if r.recovery_action is not None:
        out["recovery_action"] = r.recovery_action
    if r.remapped_rows is not None:
        out["remap_pending"] = r.remapped_rows.pending
        out["remap_failure"] = r.remapped_rows.failure
    if r.retired_pending is not None:
        out["retired_pending"] = r.retired_pending
    if r.retired_sbe is not None or r.retired_dbe is not None:
        out["retired_pages"] = (r.retired_sbe or 0) + (r.retired_dbe or 0)
    if r.nvlinks:
        out["nvlinks_down"] = tuple(link.link for link in r.nvlinks if not link.active)
    if r.pcie_width is not None:
        out["pcie_width"] = (r.pcie_width, r.pcie_width_max)
    if r.fabric_state is not None:
        out["fabric"] = (r.fabric_state, r.fabric_status, r.fabric_health)
    return out


def activities(before: Sample | None, minute: Sample, gen_max: int | None) -> dict[str, bool]:
    """What was active in a closed minute: counters that rose since the minute before, hardware
    slowdown, a busy link below its maximum generation."""
    out = {c: before is not None and getattr(minute, c) is not None and getattr(before, c) is not None
           and getattr(minute, c) != getattr(before, c) for c in COUNTERS}
    out["slowdown"] = bool(minute.reasons & SLOWDOWN_REASONS)
    out["pcie_gen"] = minute.busy_gen is not None and gen_max is not None and minute.busy_gen < gen_max
    return out


@dataclass(slots=True)
class Episodes:
    """One GPU's conditions: their last values, onsets and last activity (mutable: the agent's)."""

    values: dict[str, Hashable] = field(default_factory=dict)
    since: dict[str, datetime] = field(default_factory=dict)
    last_active: dict[str, datetime] = field(default_factory=dict)

    def note_states(self, values: Mapping[str, Hashable], now: datetime) -> list[str]:
        """Record a poll's states; the names whose value changed (a first value is no change)."""
        changed = []
        for name, value in values.items():
            if name not in self.values:
                self.values[name], self.since[name] = value, now
            elif self.values[name] != value:
                self.values[name], self.since[name] = value, now
                changed.append(name)
        return changed

    def note_activities(self, active: Mapping[str, bool], now: datetime, quiet_s: float = QUIET_S) -> list[str]:
        """Record a closed minute's activities; the names whose episode began or ended."""
        changed = []
        for name, on in active.items():
            last = self.last_active.get(name)
            if on:
                if last is None or now - last > timedelta(seconds=quiet_s):
                    self.since[name] = now
                    changed.append(name)
                self.last_active[name] = now
            elif last is not None and now - last > timedelta(seconds=quiet_s):
                del self.last_active[name]
                self.since.pop(name, None)
                changed.append(name)
        return changed

    def onsets(self) -> dict[str, datetime]:
        return dict(self.since)
