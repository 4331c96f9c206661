"""Single-bit ECC errors as a trend (Xid 92's meaning, "high single-bit ECC error rate").

Corrected errors are no fault one by one; the operations guide asks to watch them as a trend. The
GPU's count over the recent window (`sbe_window_s`) is compared with its own baseline, its rate over
the `sbe_baseline_s` before that window: a warning when the recent rate is `sbe_factor` times the
baseline and at least `sbe_min_errors` errors. Without a baseline yet (an agent up for less than two
hours) nothing is judged. Double-bit errors are not judged here: the driver reports each (Xid 48,
NVML's double-bit event) and the catalog acts on it.
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.health.history import increase, window_increase
from models.signals.health.records import GpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family, ImmediateAction, InvestigatoryAction


def baseline(rec: GpuHealth, policy: HealthPolicy) -> tuple[int, float] | None:
    """(errors, hours) of the hour samples before the recent window, at most `sbe_baseline_s` of them;
    None with fewer than two."""
    h = rec.hours
    if h.end is None or rec.minutes.end is None:
        return None
    window_start = rec.minutes.end.timestamp() - policy.sbe_window_s
    ends = [h.end.timestamp() - (len(h) - 1 - i) * h.step_s for i in range(len(h))]
    earliest = window_start - policy.sbe_baseline_s - h.step_s
    kept = [i for i, end in enumerate(ends) if earliest < end <= window_start]
    count = increase([h.sbe[i] for i in kept])
    if count is None:
        return None
    return count, (len(kept) - 1) * h.step_s / 3600


def check(rec: GpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    recent, covered = window_increase(rec.minutes, "sbe", policy.sbe_window_s)
    if recent is None or recent < policy.sbe_min_errors or covered <= 0:
        return ()
    base = baseline(rec, policy)
    if base is None or base[1] <= 0:
        return ()
    rate = recent / (covered / 3600)
    base_rate = base[0] / base[1]
    if rate <= policy.sbe_factor * base_rate:
        return ()
    return (Finding(
        "ecc_sbe_trend", Family.MEMORY, Category.HARDWARE,
        f"{recent} single-bit ECC errors in the last {covered / 60:.0f} min ({rate:.1f}/h), more than "
        f"{policy.sbe_factor:g} times this GPU's own rate over the {base[1]:.0f} h before ({base_rate:.1f}/h): "
        "a rising single-bit error rate, an early warning of failing memory",
        rec.since.get("sbe", rec.observed_at), ImmediateAction.IGNORE, InvestigatoryAction.CONTACT_SUPPORT,
        "High single-bit ECC error rate (as Xid 92)", "EXCESSIVE_SBE_INTERRUPTS",
        details={"recent_errors": recent, "recent_per_hour": round(rate, 2),
                 "baseline_per_hour": round(base_rate, 2)}),)
