"""The kernel's clocks, as pure functions: year inference for stamps without a year, uptime to wall
clock through the boot time, and the boot time itself from `/proc/stat`.

A kernel record can carry three clocks: a wall-clock stamp written by syslog, journald or
`dmesg -T` (syslog's has no year), the monotonic time since boot (`/dev/kmsg`, raw `dmesg`,
journald's `__MONOTONIC_TIMESTAMP`), and the time a reader read it. The event time is the first
two; the read time says only when the line reached us (a backlog read after a restart is hours late).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

# A stamp more than this far ahead of the read time belongs to the year before: clocks and log
# rotation can put a line a little in the future, but a December line read in January is last year's.
FUTURE_TOLERANCE = timedelta(days=2)
# Every time read from input lies in these years (in UTC): a machine whose clock was reset logs 1970,
# none logs year 1, and times near year 9999 overflow when windows and offsets are added to them
# (`0001-01-01T00:00:00+14:00` is before the first representable UTC time).
YEAR_MIN, YEAR_MAX = 1970, 9000


def time_in_range(at: datetime) -> bool:
    """True when `at` (a time without zone taken as UTC) lies within YEAR_MIN..YEAR_MAX in UTC."""
    try:
        utc = at.astimezone(UTC) if at.tzinfo is not None else at
    except (OverflowError, ValueError):
        return False
    return YEAR_MIN <= utc.year <= YEAR_MAX


def infer_year(month: int, day: int, read_at: datetime) -> int:
    """The year of a `Mon DD` stamp read at `read_at`: the read time's year, or the year before when
    that would put the stamp more than two days after the read (a Dec 31 line read on Jan 1)."""
    year = read_at.year
    try:
        ahead = date(year, month, day) - read_at.date()
    except ValueError:
        return year  # not a date that year (Feb 29, or no date at all): the caller rejects it
    return year - 1 if ahead > FUTURE_TOLERANCE else year


def at_uptime(boot_time: datetime, uptime_s: float) -> datetime:
    """Wall-clock time of a record stamped `uptime_s` seconds after a boot at `boot_time`."""
    return boot_time + timedelta(microseconds=round(uptime_s * 1_000_000))


def from_epoch_us(value: object) -> datetime | None:
    """A microseconds-since-the-epoch field (journald's `__REALTIME_TIMESTAMP`) as a UTC time."""
    try:
        at = datetime.fromtimestamp(int(str(value)) / 1_000_000, UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    return at if time_in_range(at) else None


def parse_stamp(text: str | None) -> datetime | None:
    """An ISO-8601 stamp; one without a zone is taken as UTC (kernel logs rarely say their zone)."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    if not time_in_range(at):
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def boot_time_from_stat(text: str) -> datetime | None:
    """The boot time from the contents of `/proc/stat` (its `btime` line, seconds since the epoch)."""
    for line in text.splitlines():
        if line.startswith("btime "):
            try:
                return datetime.fromtimestamp(int(line.split()[1]), UTC)
            except (IndexError, ValueError, OverflowError, OSError):
                return None
    return None

