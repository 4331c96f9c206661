"""The one time parser of every time flag, and the one format every table prints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from xidpipe.commands.timeflags import format_age, format_time, parse_duration, parse_time

NOW = datetime(2026, 11, 25, 15, 26, 51, 250000, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("24h", NOW - timedelta(hours=24)),
    ("7d", NOW - timedelta(days=7)),
    ("30m", NOW - timedelta(minutes=30)),
    ("2h30m", NOW - timedelta(hours=2, minutes=30)),
    ("1w", NOW - timedelta(weeks=1)),
    ("90s", NOW - timedelta(seconds=90)),
    ("now", NOW),
    ("today", datetime(2026, 11, 25, tzinfo=UTC)),
    ("Yesterday", datetime(2026, 11, 24, tzinfo=UTC)),
    ("2026-11-20", datetime(2026, 11, 20, tzinfo=UTC)),
    ("2026-11-25T15:26:51Z", datetime(2026, 11, 25, 15, 26, 51, tzinfo=UTC)),
    ("2026-11-25T16:26:51+01:00", datetime(2026, 11, 25, 15, 26, 51, tzinfo=UTC)),
    ("2026-11-25T15:26:51", datetime(2026, 11, 25, 15, 26, 51, tzinfo=UTC)),  # no offset: UTC
])
def test_parse_time(text: str, expected: datetime) -> None:
    got = parse_time(text, NOW)
    assert got == expected and got.tzinfo is not None


def test_today_is_the_utc_day_whatever_the_offset_of_now() -> None:
    late_evening_west = datetime(2026, 11, 24, 23, 0, tzinfo=timezone(timedelta(hours=-5)))  # 04:00 UTC on the 25th
    assert parse_time("today", late_evening_west) == datetime(2026, 11, 25, tzinfo=UTC)


@pytest.mark.parametrize("text", ["", "soon", "24", "h", "0h", "2026-13-01", "24 hours ago", "1y"])
def test_parse_time_refuses_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a time|not a duration|longer than 0"):
        parse_time(text, NOW)


@pytest.mark.parametrize(("text", "seconds"), [("4h", 14400), ("1.5h", 5400), ("2h30m", 9000), ("1d", 86400)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize(("value", "shown"), [
    (datetime(2026, 11, 25, 15, 26, 51, 999000, tzinfo=UTC), "2026-11-25T15:26:51Z"),
    (datetime(2026, 11, 25, 16, 26, 51, tzinfo=timezone(timedelta(hours=1))), "2026-11-25T15:26:51Z"),
    (datetime(2026, 11, 25, 15, 26, 51), "2026-11-25T15:26:51Z"),
    ("2026-11-25T15:26:51.200000", "2026-11-25T15:26:51Z"),
    ("2026-11-25T15:26:51+00:00", "2026-11-25T15:26:51Z"),
    ("2026-11-25T15:26:51Z", "2026-11-25T15:26:51Z"),
    ("uptime 30000.000000s", "uptime 30000.000000s"),  # a log with no wall clock
    (None, "-"),
])
def test_format_time(value: datetime | str | None, shown: str) -> None:
    assert format_time(value) == shown


@pytest.mark.parametrize(("ago", "shown"), [
    (timedelta(seconds=0), "0s"), (timedelta(seconds=45), "45s"), (timedelta(seconds=119), "119s"),
    (timedelta(minutes=5, seconds=30), "5m30s"), (timedelta(minutes=7), "7m"), (timedelta(minutes=95), "95m"),
    (timedelta(hours=3, minutes=40), "3h40m"), (timedelta(hours=5), "5h"), (timedelta(hours=40), "40h"),
    (timedelta(days=3, hours=5), "3d5h"), (timedelta(days=7, hours=17, minutes=30), "7d17h"),
    (timedelta(days=45), "45d"), (timedelta(days=800), "2y70d"), (timedelta(days=365 * 9), "9y"),
    (timedelta(hours=-2), "0s"),  # a clock ahead of ours: no negative age
])
def test_ages_as_kubectl_writes_them(ago: timedelta, shown: str) -> None:
    assert format_age(NOW - ago, NOW) == shown
    assert format_age((NOW - ago).isoformat(), NOW) == shown


def test_an_age_of_nothing_or_of_no_time() -> None:
    assert format_age(None, NOW) == "-" and format_age("uptime 30000.0s", NOW) == "-"
    assert format_age(datetime(2026, 11, 25, 14, 26, 51), NOW) == "60m"  # no offset: UTC
