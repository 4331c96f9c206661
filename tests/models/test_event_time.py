"""The kernel's clock: year inference, stamps of whole lines, and the event time of parsed records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.event_time import boot_times, line_event_time, record_time
from models.incidents import observation_from_kernel
from models.kernlog import KernelLogParser, ParseOptions
from models.kernlog.clock import at_uptime, boot_time_from_stat, infer_year
from models.kernlog.prefix import leading_stamp, parse_prefix
from models.node_records import GpuInventory, KernelLine
from models.wire import decode_node_record

BOOT = datetime(2026, 11, 25, 9, 46, 40, tzinfo=UTC)
READ = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)


def _at(y: int, mo: int, d: int, h: int = 0, mi: int = 0, sec: int = 0, us: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, sec, us, tzinfo=UTC)


@pytest.mark.parametrize(
    ("month", "day", "read_at", "year"),
    [
        (11, 25, _at(2026, 12, 1), 2026),  # a week-old line
        (12, 31, _at(2027, 1, 1), 2026),  # read just after new year: last year's
        (12, 1, _at(2027, 1, 15), 2026),
        (1, 1, _at(2026, 12, 31), 2026),  # earlier the same year
        (12, 3, _at(2026, 12, 1), 2026),  # two days ahead: a clock a little fast, not last year
        (12, 4, _at(2026, 12, 1), 2025),  # further ahead: last year's
        (2, 29, _at(2028, 3, 1), 2028),
        (2, 30, _at(2026, 3, 1), 2026),  # no such date: left to the caller to reject
    ],
)
def test_infer_year(month: int, day: int, read_at: datetime, year: int) -> None:
    assert infer_year(month, day, read_at) == year


@pytest.mark.parametrize(
    ("prefix", "now", "stamp"),
    [
        ("Dec 31 23:59:59 gpu-1 kernel: ", _at(2027, 1, 1, 0, 0, 5), "2026-12-31T23:59:59"),
        ("Nov 25 09:46:43 gpu-1 kernel: ", READ, "2026-11-25T09:46:43"),
        ("Dez 24 10:00:00 gpu-1 kernel: ", _at(2027, 1, 2), "2026-12-24T10:00:00"),
        ("[Wed Dec 31 23:59:59 2025] ", _at(2027, 1, 1), "2025-12-31T23:59:59"),  # dmesg -T names its year
        ("Feb 29 10:00:00 gpu-1 kernel: ", _at(2027, 3, 1), None),  # not a date in 2027
    ],
)
def test_parser_prefixes_infer_the_year_relative_to_now(prefix: str, now: datetime, stamp: str | None) -> None:
    assert parse_prefix(prefix, None, now).timestamp == stamp


@pytest.mark.parametrize(
    ("line", "boot_time", "want"),
    [
        ("[30000.000000] NVRM: Xid (PCI:0000:9a:00): 74, NVLink", BOOT, _at(2026, 11, 25, 18, 6, 40)),
        ("[    4.200000] NVRM: loading Tue Oct  8 03:22:07 UTC 2024", BOOT, _at(2026, 11, 25, 9, 46, 44, 200000)),
        ("[30000.000000] NVRM: Xid (PCI:0000:9a:00): 74", None, None),  # uptime only, boot unknown
        ("Nov 25 09:46:44.100000 gpu-node-01 kernel: NVRM: loading ... Tue Oct  8 03:22:07 UTC 2024", None,
         _at(2026, 11, 25, 9, 46, 44, 100000)),
        ("Nov 25 09:46:43 gpu-node-02 kernel: [    3.900000] NVRM: x", BOOT, _at(2026, 11, 25, 9, 46, 43)),
        ("Dec 30 23:00:00 gpu-1 kernel: NVRM: Xid", None, _at(2025, 12, 30, 23)),  # read Dec 1 2026: last year
        ("[Wed Nov 25 09:46:44 2026] NVRM: loading", None, _at(2026, 11, 25, 9, 46, 44)),
        ("2026-11-25T10:46:44.5+01:00 gpu-1 kernel: NVRM: Xid", None, _at(2026, 11, 25, 9, 46, 44, 500000)),
        ("<4>1 2026-11-25T09:46:44Z gpu-1 kernel - - - NVRM: Xid", None, _at(2026, 11, 25, 9, 46, 44)),
        ("6,339,5000000,-;NVRM: Xid", BOOT, _at(2026, 11, 25, 9, 46, 45)),
        ('{"__REALTIME_TIMESTAMP":"1795600004000000","MESSAGE":"NVRM: x"}', None,
         datetime.fromtimestamp(1795600004, UTC)),
        ("NVRM: Xid (PCI:0000:9a:00): 74, at Nov 25 09:46:43", BOOT, None),  # a time inside the message
    ],
)
def test_line_event_time(line: str, boot_time: datetime | None, want: datetime | None) -> None:
    assert line_event_time(line, read_at=READ, boot_time=boot_time) == want


def test_leading_stamp_never_takes_a_time_from_the_message() -> None:
    p = leading_stamp("[    4.200000] NVRM: loading NVIDIA ... Tue Oct  8 03:22:07 UTC 2024", None, READ)
    assert (p.timestamp, p.uptime_s) == (None, 4.2)


def test_boot_time_from_proc_stat() -> None:
    stat = "cpu  1 2 3\nintr 5\nctxt 99\nbtime 1795600000\nprocesses 7\n"
    assert boot_time_from_stat(stat) == datetime.fromtimestamp(1795600000, UTC)
    assert boot_time_from_stat("cpu 1 2 3\n") is None
    assert boot_time_from_stat("btime soon\n") is None
    assert at_uptime(BOOT, 0.000001) == BOOT + timedelta(microseconds=1)


XID = "NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 13"


def _line(message: str, **kw: object) -> KernelLine:
    fields: dict[str, object] = {"node": "n", "record_id": "r", "source": "file", "message": message,
                                 "fault": True, "observed_at": READ}
    fields.update(kw)
    return KernelLine.model_validate(fields)


def _record(message: str, now: datetime = READ) -> object:
    (rec,) = KernelLogParser(ParseOptions(now=now)).parse([message])
    return rec


@pytest.mark.parametrize(
    ("message", "line_fields", "parse_now", "want", "clock"),
    [
        # a wall-clock stamp of its own wins over everything the agent knew
        (f"[Wed Nov 25 18:06:40 2026] {XID}", {"event_at": _at(2026, 11, 25, 18)}, READ,
         _at(2026, 11, 25, 18, 6, 40), "stamp"),
        # only an uptime: the line's boot time turns it into wall clock
        (f"[30000.000000] {XID}", {"boot_time": BOOT}, READ, _at(2026, 11, 25, 18, 6, 40), "uptime"),
        # a bare kmsg message: the agent's event time of the line
        (XID, {"event_at": _at(2026, 11, 25, 18, 6, 40), "source": "kmsg"}, READ, _at(2026, 11, 25, 18, 6, 40),
         "line"),
        # a yearless stamp parsed after new year: the agent's year (as of the read) wins over the parser's
        (f"Dec 31 23:59:59 gpu-1 kernel: {XID}", {"event_at": _at(2026, 12, 31, 23, 59, 59)},
         _at(2028, 1, 5), _at(2026, 12, 31, 23, 59, 59), "line"),
        # nothing known: the read time
        (f"[30000.000000] {XID}", {}, READ, READ, "read"),
    ],
)
def test_record_time(message: str, line_fields: dict[str, object], parse_now: datetime, want: datetime,
                     clock: str) -> None:
    rec = _record(message, parse_now)
    got = record_time(rec, _line(message, **line_fields))  # type: ignore[arg-type]
    assert (got.at, got.clock) == (want, clock)
    assert got.reason


def test_kernel_observation_happens_at_the_event_time_not_the_read_time() -> None:
    line = _line(XID, source="kmsg", event_at=_at(2026, 11, 25, 18, 6, 40), observed_at=READ)
    obs = observation_from_kernel(_record(XID), line)  # type: ignore[arg-type]
    assert obs.occurred_at == _at(2026, 11, 25, 18, 6, 40)


def test_records_of_older_agents_still_decode() -> None:
    old = ('{"schema_version":1,"node":"n","record_id":"kmsg:b:1","kind":"kernel_line","source":"kmsg",'
           '"message":"NVRM: x","fault":false,"observed_at":"2026-11-25T10:00:00Z"}')
    line = decode_node_record(old)
    assert isinstance(line, KernelLine) and line.event_at is None and line.boot_time is None
    new = line.model_copy(update={"event_at": BOOT, "boot_time": BOOT})
    again = decode_node_record(new.model_dump_json())
    assert isinstance(again, KernelLine) and (again.event_at, again.boot_time) == (BOOT, BOOT)


def test_boot_times_from_recorded_inventories() -> None:
    def inv(node: str, at: datetime, boot: datetime | None) -> GpuInventory:
        return GpuInventory(node=node, record_id=f"{node}:{at}", emitted_at=at, boot_time=boot)

    later_boot = BOOT + timedelta(days=1)
    records = [inv("a", _at(2026, 11, 25, 10), BOOT), inv("a", _at(2026, 11, 26, 10), later_boot),
               inv("b", _at(2026, 11, 25, 10), None)]
    assert boot_times(records) == {"a": later_boot}
