"""Times on the command line: the one parser every time flag uses, and the one format every table prints.

Accepted by every time flag (`--since`, `--until`, `--starts-at`, `--at`):

    24h, 7d, 30m, 2h30m, 1w, 90s   that long before now
    now, today, yesterday          now; midnight UTC today; midnight UTC yesterday
    2026-11-25                     midnight UTC of that day
    2026-11-25T15:26:51Z           ISO 8601; an offset is honoured, a time without one is UTC

Printed: ISO 8601 in UTC to the second, `2026-11-25T15:26:51Z`; an age (how long ago) as `kubectl`
prints one: `45s`, `5m30s`, `95m`, `3h40m`, `40h`, `3d5h`, `45d`, `2y30d`.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, date, datetime, timedelta

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}
EXAMPLES = "24h, 7d, 30m, yesterday, today, 2026-11-25, 2026-11-25T15:26:51Z"


def parse_duration(text: str) -> timedelta:
    """`4h`, `30m`, `2h30m`, `1d`, `90s`, `1w`: longer than zero."""
    spec = text.strip().lower()
    parts = _DURATION.findall(spec)
    if not parts or "".join(n + u for n, u in parts) != spec:
        raise ValueError(f"not a duration: {text!r} (examples: 4h, 30m, 2h30m, 1d, 1w)")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"a duration must be longer than 0 s: {text!r}")
    return timedelta(seconds=seconds)


def parse_time(text: str, now: datetime) -> datetime:
    """An aware UTC datetime for `text` (see the module's table), relative to the aware `now`."""
    spec = text.strip()
    word = spec.lower()
    midnight = datetime.combine(now.astimezone(UTC).date(), datetime.min.time(), UTC)
    named = {"now": now.astimezone(UTC), "today": midnight, "yesterday": midnight - timedelta(days=1)}
    if word in named:
        return named[word]
    if word and "".join(n + u for n, u in _DURATION.findall(word)) == word:
        return now.astimezone(UTC) - parse_duration(word)
    try:
        if len(spec) == 10:
            return datetime.combine(date.fromisoformat(spec), datetime.min.time(), UTC)
        at = datetime.fromisoformat(spec.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a time: {text!r} (examples: {EXAMPLES})") from None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def time_arg(text: str) -> datetime:
    """argparse `type=` for a time flag: the error names what is accepted."""
    try:
        return parse_time(text, datetime.now(UTC))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def format_time(value: datetime | str | None) -> str:
    """`2026-11-25T15:26:51Z`; a time without an offset is taken as UTC; `-` for none. Text that is not
    an ISO 8601 time (an uptime from a log with no wall clock) is kept as it is."""
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    else:
        at = value
    at = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(value: datetime | str) -> datetime | None:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def format_age(value: datetime | str | None, now: datetime) -> str:
    """How long before `now` `value` was, in kubectl's words (`HumanDuration`): at most two units, the
    second only while it still matters (`5m30s` but `95m`; `3h40m` but `40h`; `3d5h` but `45d`); `-`
    for none or an unreadable time, `0s` for a time ahead of `now`."""
    at = _when(value) if value is not None and value != "" else None
    if at is None:
        return "-"
    return format_duration((now.astimezone(UTC) - at).total_seconds())


def format_duration(seconds: float) -> str:
    """A duration as `format_age` writes an age (`45s`, `5m30s`, `3h40m`, `3d5h`, `45d`); `0s` below 0."""
    seconds = max(0, int(seconds))
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    years = days // 365
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    if years < 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"
