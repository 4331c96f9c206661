"""Thermal: hardware slowdown sustained, together with heat or a power limit.

gpud's hw-slowdown check: a slowdown clock-event reason (HW slowdown 0x8, SW thermal 0x20, HW
thermal 0x40, HW power brake 0x80) in at least `thermal_min_share` of the minutes of
`thermal_window_s` is a fault for hardware inspection ("overheating or PSU failing"). The
operations guide asks for slowdown *together with* a temperature or power limit, not slowdown
alone, so a minute counts only when it also was hot (a thermal reason, or within
`thermal_margin_c` of the slowdown temperature) or power-limited (a power-brake or power-cap reason,
or a draw of `power_limit_share` of the enforced limit). The minutes are the window's, so a window
the history does not cover yet cannot reach the share.
"""

from __future__ import annotations

import math

from models.signals.finding import Finding
from models.signals.health.history import POWER_REASONS, SLOWDOWN_REASONS, THERMAL_REASONS, Sample, last
from models.signals.health.records import GpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction


def limited(s: Sample, policy: HealthPolicy) -> str | None:
    """Why a minute was at a limit: "heat", "power", or None."""
    if s.reasons & THERMAL_REASONS or (s.margin_c is not None and s.margin_c <= policy.thermal_margin_c):
        return "heat"
    if s.reasons & POWER_REASONS or (s.power_pct is not None and s.power_pct >= 100 * policy.power_limit_share):
        return "power"
    return None


def check(rec: GpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    window = last(rec.minutes, policy.thermal_window_s)
    minutes = math.ceil(policy.thermal_window_s / 60)
    hot = [limited(s, policy) for s in window if s.reasons & SLOWDOWN_REASONS]
    counted = [why for why in hot if why is not None]
    needed = math.ceil(policy.thermal_min_share * minutes)
    if len(counted) < needed:
        return ()
    heat, power = counted.count("heat"), counted.count("power")
    r = rec.reading
    return (Finding(
        "thermal_slowdown", Family.THERMAL, Category.THERMAL,
        f"hardware slowdown in {len(counted)} of the last {minutes} minutes (threshold {needed}), at a limit: "
        f"hot in {heat}, power-limited in {power} (now {r.temperature_c} C, slowdown at {r.temperature_slowdown_c} C, "
        f"{r.power_mw} mW of {r.power_limit_mw} mW): overheating or a failing power supply",
        rec.since.get("slowdown", rec.observed_at), ImmediateAction.CHECK_MECHANICALS, None,
        "GPU clocks slowed down by heat or power", details={"minutes": len(counted), "window_minutes": minutes,
                                                            "hot": heat, "power_limited": power}),)
