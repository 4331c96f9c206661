"""GPU fault rates over the span the history covers, never stretched past it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.fault_rates import Span, describe_days, gpu_rate, why_no_30d

T0 = datetime(2026, 11, 25, tzinfo=UTC)


def test_one_day_of_data_is_a_rate_over_that_day_not_per_30_days() -> None:
    span = Span(T0, T0 + timedelta(days=1))
    rate = gpu_rate(7, {"a": [T0], "b": [T0], "c": [T0], "d": [T0]}, span)
    assert rate.incidents_per_gpu == round(4 / 7, 3) and rate.incidents_per_gpu_per_30d is None
    assert why_no_30d(span) == "the history covers 1.0 days, less than 30 days: no rate per 30 days"


def test_thirty_days_or_more_give_the_rate_per_30_days() -> None:
    span = Span(T0, T0 + timedelta(days=60))
    rate = gpu_rate(10, {"a": [T0, T0 + timedelta(days=10)], "b": [T0]}, span)
    assert (rate.incidents, rate.incidents_per_gpu, rate.incidents_per_gpu_per_30d) == (3, 0.3, 0.15)
    assert rate.mean_time_between_incidents_s == 10 * 86400 and why_no_30d(span) is None


def test_the_mean_gap_is_per_gpu_and_needs_two_incidents_of_one() -> None:
    span = Span(T0, T0 + timedelta(hours=3))
    assert gpu_rate(2, {"a": [T0], "b": [T0 + timedelta(hours=1)]}, span).mean_time_between_incidents_s is None
    pooled = gpu_rate(2, {"a": [T0, T0 + timedelta(hours=1)], "b": [T0, T0 + timedelta(hours=2), T0 + timedelta(
        hours=3)]}, span)
    assert pooled.mean_time_between_incidents_s == round(4 * 3600 / 3, 1)  # 1 h and 3 h over 3 gaps, pooled
    assert gpu_rate(0, {}, span).incidents_per_gpu is None


@pytest.mark.parametrize(("days", "said"), [(0.0, "0 minutes"), (0.02, "29 minutes"), (0.592, "14.2 hours"),
                                            (1.0, "1.0 days"), (3.5, "3.5 days"), (45.2, "45 days")])
def test_spans_as_people_say_them(days: float, said: str) -> None:
    assert describe_days(days) == said
