"""Recognise what stands in front of a kernel message: timestamps, uptime, host, kmsg headers.

Supported: raw `dmesg` (`[ 1843.308145] `), `dmesg -T`, `dmesg --delta`, `dmesg --time-format=iso`,
`journalctl -k` short, short-iso, short-precise (and `-o json`, handled by the parser), syslog
RFC 3164 (with or without host, localised month names) and RFC 5424, rsyslog `kern.log`, and
`/dev/kmsg` records. Whatever else stands in front (another tool's prefix) is ignored.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from functools import lru_cache
from typing import NamedTuple

from models.kernlog.clock import YEAR_MAX, YEAR_MIN, infer_year

KMSG_HEADER = re.compile(r"^(?P<prio>[0-9]{1,4}),(?P<seq>[0-9]{1,20}),(?P<usec>[0-9]{1,20}),(?P<flags>[^;]{0,16});")
_DMESG_UPTIME = re.compile(r"\[\s*(?P<up>[0-9]+\.[0-9]{1,9})(?:\s*<\s*[+-]?[0-9.]{1,24}\s*>)?\s*\]")
_DMESG_CTIME = re.compile(
    r"\[\s*[^\W\d_]{1,16}\.?\s+(?P<mon>[^\W\d_]{1,16}\.?|[0-9]{1,2}月)\s+(?P<day>[0-9]{1,2})\s+"
    r"(?P<time>[0-9]{1,2}:[0-9][0-9]:[0-9][0-9])\s+(?P<year>[0-9]{4})(?:\s*<\s*[+-]?[0-9.]{1,24}\s*>)?\s*\]"
)
_ISO = re.compile(
    r"(?<![0-9])(?P<date>[0-9]{4}-[0-9][0-9]-[0-9][0-9])[T ](?P<time>[0-9][0-9]:[0-9][0-9]:[0-9][0-9])"
    r"(?:[.,](?P<frac>[0-9]{1,9}))?"
    r"(?P<tz>Z|[+-][0-9][0-9]:?[0-9][0-9])?(?![0-9])"
)
_RFC3164 = re.compile(
    r"(?<![\w.])(?P<mon>[^\W\d_]{3,9}\.?|[0-9]{1,2}[月월])\s+(?P<day>[0-9]{1,2})\s+"
    r"(?P<time>[0-9][0-9]:[0-9][0-9]:[0-9][0-9])(?:\.(?P<frac>[0-9]{1,9}))?(?![0-9:])"
)
_RFC5424 = re.compile(
    r"<[0-9]{1,3}>1\s+(?P<ts>\S+)\s+(?P<host>\S+)\s+(?P<app>\S+)\s+\S+\s+\S+\s+(?:-|\[.{0,512}?\])\s*"
)
# Anchored whole-prefix forms, tried first (the common cases, one regex each).
_FAST_DMESG = re.compile(r"^\[\s*(?P<up>[0-9]+\.[0-9]{1,9})\]\s?$")
_FAST_SYSLOG = re.compile(
    r"^(?:<[0-9]{1,3}>)?(?P<mon>[^\W\d_]{3,9}\.?|[0-9]{1,2}[月월])\s+(?P<day>[0-9]{1,2})\s+(?P<time>[0-9][0-9]:[0-9][0-9]:[0-9][0-9])"
    r"(?:\.(?P<frac>[0-9]{1,9}))?\s+(?:(?P<host>[^\s:\[\]<>]+)\s+)?(?P<tag>[^\s:\[\]<>]+)(?:\[[0-9]+\])?:"
    r"\s*(?:\[\s*(?P<up>[0-9]+\.[0-9]{1,9})\]\s?)?$"
)
_FAST_ISO_SYSLOG = re.compile(
    r"^(?:<[0-9]{1,3}>)?(?P<date>[0-9]{4}-[0-9][0-9]-[0-9][0-9])[T ](?P<time>[0-9][0-9]:[0-9][0-9]:[0-9][0-9])"
    r"(?:[.,](?P<frac>[0-9]{1,9}))?"
    r"(?P<tz>Z|[+-][0-9][0-9]:?[0-9][0-9])?\s+(?:(?:(?P<host>[^\s:\[\]<>]+)\s+)?(?P<tag>[^\s:\[\]<>]+)(?:\[[0-9]+\])?:"
    r"\s*(?:\[\s*(?P<up>[0-9]+\.[0-9]{1,9})\]\s?)?)?$"
)
_HOST_TAG = re.compile(r"^\s*(?:(?P<host>[^\s:\[\]<>]+)\s+)?(?P<tag>[^\s:\[\]<>]+)(?:\[[0-9]+\])?:(?:\s|$)")

_MONTHS: dict[str, int] = {}
for _num, _names in enumerate(
    (
        "jan janv ene gen jän янв",
        "feb fév févr fev фев",
        "mar mär mrt mars мар",
        "apr avr abr апр",
        "may mai mei mag май",
        "jun juin giu июн",
        "jul juil lug июл",
        "aug aoû août ago авг",
        "sep sept set сен",
        "oct okt out ott окт",
        "nov ноя",
        "dec dez déc dic дек",
    ),
    start=1,
):
    for _name in _names.split():
        _MONTHS[_name] = _num


@lru_cache(maxsize=512)
def month_number(token: str) -> int | None:
    """Month number of an English or localised month name or abbreviation (`Nov`, `Dez`, `déc.`, `11月`)."""
    t = token.lower().rstrip(".")
    if t.endswith(("月", "월")):
        digits = t[:-1]
        return int(digits) if digits.isascii() and digits.isdigit() and 1 <= int(digits) <= 12 else None
    for n in (4, 3):
        got = _MONTHS.get(t[:n])
        if got:
            return got
    return None


class Prefix(NamedTuple):
    timestamp: str | None = None
    uptime_s: float | None = None
    host: str | None = None
    format: str = "plain"
    kmsg_seq: int | None = None


def _frac_us(frac: str | None) -> int:
    return int((frac or "0")[:6].ljust(6, "0"))


@lru_cache(maxsize=4096)
def _valid_date(year: int, month: int, day: int) -> bool:
    if not YEAR_MIN <= year <= YEAR_MAX:  # a year no log carries (and one UTC cannot hold with an offset)
        return False
    try:
        date(year, month, day)
    except ValueError:
        return False
    return True


@lru_cache(maxsize=256)
def _tz_text(text: str | None) -> str:
    if not text:
        return ""
    if text == "Z":
        return "+00:00"
    return f"{text[:3]}:{text[-2:]}"


def _iso_text(day_text: str, clock: str, frac: str | None, tz: str | None) -> str | None:
    """ISO 8601 text as `datetime.isoformat()` writes it, built without creating a datetime."""
    y, m, d = int(day_text[:4]), int(day_text[5:7]), int(day_text[8:10])
    if not _valid_date(y, m, d) or clock[:2] > "23" or clock[3:5] > "59" or clock[6:8] > "60":
        return None
    us = _frac_us(frac)
    return f"{day_text}T{clock}{f'.{us:06d}' if us else ''}{_tz_text(tz)}"


def _yearless(month: int, day: int, clock: str, frac: str | None, year: int | None, now: datetime) -> str | None:
    y = year if year is not None else infer_year(month, day, now)
    return _iso_text(f"{y:04d}-{month:02d}-{day:02d}", clock, frac, None)


def _iso(m: re.Match[str]) -> str | None:
    return _iso_text(m["date"], m["time"], m["frac"], m["tz"])


def _host_after(rest: str) -> str | None:
    m = _HOST_TAG.match(rest)
    return m["host"] if m else None


def parse_prefix(prefix: str, year: int | None, now: datetime) -> Prefix:
    """Read the timestamp, uptime and host out of the text in front of a kernel message."""
    head = prefix[:1]
    if head == "[":
        fd = _FAST_DMESG.match(prefix)
        if fd:
            return Prefix(uptime_s=float(fd["up"]), format="dmesg")
        ct = _DMESG_CTIME.match(prefix)
        if ct and ct.end() >= len(prefix.rstrip()):
            month = month_number(ct["mon"])
            stamp = _yearless(month, int(ct["day"]), ct["time"], None, int(ct["year"]), now) if month else None
            return Prefix(timestamp=stamp, format="dmesg-T")
    elif head == "<":
        m5 = _RFC5424.match(prefix)
        if m5 and m5.end() >= len(prefix):
            iso = _ISO.match(m5["ts"])
            return Prefix(timestamp=_iso(iso) if iso else None, host=None if m5["host"] == "-" else m5["host"],
                          format="rfc5424")
    elif head.isdigit():
        km = KMSG_HEADER.match(prefix)
        if km:
            return Prefix(uptime_s=int(km["usec"]) / 1_000_000, format="kmsg", kmsg_seq=int(km["seq"]))
        fi = _FAST_ISO_SYSLOG.match(prefix)
        if fi:
            up = fi["up"]
            return Prefix(timestamp=_iso(fi), uptime_s=float(up) if up else None, host=fi["host"],
                          format="iso-syslog" if fi["tag"] else "dmesg-iso")
    if head and not head.isspace():
        fs = _FAST_SYSLOG.match(prefix)
        if fs:
            month = month_number(fs["mon"])
            if month:
                up = fs["up"]
                return Prefix(
                    timestamp=_yearless(month, int(fs["day"]), fs["time"], fs["frac"], year, now),
                    uptime_s=float(up) if up else None, host=fs["host"], format="syslog",
                )
    return _parse_prefix_general(prefix, year, now)


def _parse_prefix_general(prefix: str, year: int | None, now: datetime) -> Prefix:
    timestamp: str | None = None
    uptime: float | None = None
    host: str | None = None
    fmt = "plain"
    seq: int | None = None

    km = KMSG_HEADER.match(prefix)
    if km:
        return Prefix(uptime_s=int(km["usec"]) / 1_000_000, format="kmsg", kmsg_seq=int(km["seq"]))

    m5 = _RFC5424.search(prefix)
    if m5:
        iso = _ISO.match(m5["ts"])
        return Prefix(
            timestamp=_iso(iso) if iso else None,
            uptime_s=_uptime(prefix[m5.end() :]),
            host=None if m5["host"] == "-" else m5["host"],
            format="rfc5424",
        )

    ct = _DMESG_CTIME.search(prefix)
    if ct:
        month = month_number(ct["mon"])
        if month:
            timestamp = _yearless(month, int(ct["day"]), ct["time"], None, int(ct["year"]), now)
        return Prefix(timestamp=timestamp, format="dmesg-T")

    iso_m = _ISO.search(prefix)
    if iso_m:
        timestamp = _iso(iso_m)
        rest = prefix[iso_m.end() :]
        host = _host_after(rest)
        fmt = "iso-syslog" if host or ":" in rest else "dmesg-iso"
    else:
        sm = _RFC3164.search(prefix)
        if sm:
            month = month_number(sm["mon"])
            if month:
                timestamp = _yearless(month, int(sm["day"]), sm["time"], sm["frac"], year, now)
                host = _host_after(prefix[sm.end() :])
                fmt = "syslog"
    uptime = _uptime(prefix)
    if uptime is not None and fmt == "plain":
        fmt = "dmesg"
    return Prefix(timestamp=timestamp, uptime_s=uptime, host=host, format=fmt, kmsg_seq=seq)


def _uptime(text: str) -> float | None:
    m = _DMESG_UPTIME.search(text)
    return float(m["up"]) if m else None


class LineSource(NamedTuple):
    """Who a log line says wrote it: its syslog tag (`kernel`, `sshd`) and its syslog facility, each
    None when the line's format carries none (raw `dmesg`, a bare message)."""

    tag: str | None = None
    facility: int | None = None


_PRI_5424 = re.compile(r"<(?P<pri>[0-9]{1,3})>1\s")


def line_source(prefix: str) -> LineSource:
    """The tag and facility of the syslog header, `/dev/kmsg` record header or RFC 5424 header that
    `prefix` (the text in front of a kernel message, or a line's head) starts with or holds.

    The tag is the word after the first syslog timestamp (and its host): a message that repeats a
    header (`sshd[12]: Invalid user Nov 25 10:00:00 h kernel: ...`) is judged by the first. Raw
    `dmesg` forms (`[ 123.4]`, `[Tue Nov 25 ...]`) carry no tag."""
    head = prefix[:1]
    facility: int | None = None
    if head.isdigit():
        km = KMSG_HEADER.match(prefix)
        if km:
            return LineSource(None, int(km["prio"]) >> 3)
    elif head == "<":
        m5 = _RFC5424.match(prefix)
        if m5:
            pri = _PRI_5424.match(prefix)
            return LineSource(m5["app"], int(pri["pri"]) >> 3 if pri else None)
        pri = _PRI.match(prefix)
        if pri:
            facility = int(prefix[1 : pri.end() - 1]) >> 3
            prefix = prefix[pri.end() :]
            head = prefix[:1]
    if head == "[":
        return LineSource(None, facility)
    stamps = [m for m in (_RFC3164.search(prefix), _ISO.search(prefix)) if m is not None]
    if not stamps:
        return LineSource(None, facility)
    stamp = min(stamps, key=lambda m: m.start())
    tag = _HOST_TAG.match(prefix[stamp.end() :])
    return LineSource(tag["tag"] if tag else None, facility)


_TAG_UPTIME = re.compile(r"\s+(?:[^\s:\[\]<>]+\s+)?[^\s:\[\]<>]+(?:\[[0-9]+\])?:\s*\[\s*(?P<up>[0-9]+\.[0-9]{1,9})\]")
_PRI = re.compile(r"<[0-9]{1,3}>")


def leading_stamp(line: str, year: int | None, now: datetime) -> Prefix:
    """The stamp a whole log line starts with: wall clock, uptime, or both (`Nov 25 ... kernel: [ 3.9]`).

    For readers that do not split the message off (the agent's file source): only forms anchored at
    the start of the line count, so a time inside the message (`... Tue Oct  8 03:22:07 UTC 2024`) is
    never taken for the line's. Yearless stamps get `year`, else the year `infer_year` gives for `now`.
    """
    head = line[:1]
    if head == "[":
        up = _DMESG_UPTIME.match(line)
        if up:
            return Prefix(uptime_s=float(up["up"]), format="dmesg")
        ct = _DMESG_CTIME.match(line)
        month = month_number(ct["mon"]) if ct else None
        if ct and month:
            return Prefix(timestamp=_yearless(month, int(ct["day"]), ct["time"], None, int(ct["year"]), now),
                          format="dmesg-T")
        return Prefix()
    if head == "<":
        m5 = _RFC5424.match(line)
        if m5:
            iso = _ISO.match(m5["ts"])
            return Prefix(timestamp=_iso(iso) if iso else None, uptime_s=_uptime(line[m5.end():m5.end() + 24]),
                          format="rfc5424")
        pri = _PRI.match(line)
        line = line[pri.end():] if pri else line
        head = line[:1]
    if head.isdigit():
        km = KMSG_HEADER.match(line)
        if km:
            return Prefix(uptime_s=int(km["usec"]) / 1_000_000, format="kmsg", kmsg_seq=int(km["seq"]))
        iso_m = _ISO.match(line)
        if iso_m:
            tail = _TAG_UPTIME.match(line, iso_m.end())
            return Prefix(timestamp=_iso(iso_m), uptime_s=float(tail["up"]) if tail else None, format="iso-syslog")
        return Prefix()
    sm = _RFC3164.match(line)
    month = month_number(sm["mon"]) if sm else None
    if sm and month:
        tail = _TAG_UPTIME.match(line, sm.end())
        return Prefix(timestamp=_yearless(month, int(sm["day"]), sm["time"], sm["frac"], year, now),
                      uptime_s=float(tail["up"]) if tail else None, format="syslog")
    return Prefix()
