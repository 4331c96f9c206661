"""Kernel lines as log shippers export them (Fluent Bit, Elastic, Vector, Loki): the message is read as
a text line, the shipper's host and time fill what its header leaves out, and a line another writer
sent is refused as it is in a text log."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from models.kernlog import ParseOptions, parse_lines

OPTS = ParseOptions(year=2024, now=datetime(2024, 12, 20, tzinfo=UTC))
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def parsed(*entries: dict[str, object]) -> list[tuple[int | None, str | None, str | None]]:
    return [(r.xid, r.host, r.timestamp) for r in parse_lines([json.dumps(e) for e in entries], OPTS)]


@pytest.mark.parametrize(("entry", "expected"), [
    ({"date": 1714648953.5, "log": f"[1234567.890123] {XID79}", "hostname": "gpu07"},
     (79, "gpu07", "2024-05-02T11:22:33.500000+00:00")),  # Fluent Bit: epoch seconds, `log`
    ({"@timestamp": "2024-05-02T11:22:33.123Z", "host": {"name": "gpu08"}, "message": XID79},
     (79, "gpu08", "2024-05-02T11:22:33.123000+00:00")),  # Elastic: ECS host.name
    ({"timestamp": "2024-05-02T13:22:33+02:00", "kubernetes": {"host": "gpu09"}, "message": f"kernel: {XID79}"},
     (79, "gpu09", "2024-05-02T11:22:33+00:00")),  # Vector from a pod's view: kubernetes.host, an offset
    ({"time": "2024-05-02T11:22:33", "host": "gpu10", "msg": XID79},
     (79, "gpu10", None)),  # a time without its zone names no instant
    ({"@timestamp": "2024-05-02T11:22:33Z", "host": "shipper-1",
      "message": f"2024-05-02T11:20:00+00:00 gpu11 kernel: {XID79}"},
     (79, "gpu11", "2024-05-02T11:20:00+00:00")),  # the kernel line's own header wins over the shipper's
])
def test_a_shipped_kernel_line_is_read_with_the_shippers_host_and_time(
        entry: dict[str, object], expected: tuple[int, str | None, str | None]) -> None:
    assert parsed(entry) == [expected]


@pytest.mark.parametrize("entry", [
    {"ident": "python3", "host": "gpu07", "message": XID79},  # the shipper says a process wrote it
    {"host": "gpu07", "message": f"May  2 11:22:33 gpu07 trainer[4411]: {XID79}"},  # so does its header
    {"host": "gpu07", "message": "EXT4-fs (nvme0n1p2): re-mounted."},  # no driver line
    {"host": "gpu07", "level": "info"},  # no message at all
])
def test_what_no_kernel_wrote_is_no_fault(entry: dict[str, object]) -> None:
    assert parsed(entry) == []


def test_a_hostile_host_or_time_is_left_out_not_trusted() -> None:
    (rec,) = parse_lines([json.dumps({"host": "gpu07; rm -rf /", "@timestamp": "9999-99-99T00:00:00Z",
                                      "message": XID79})], OPTS)
    assert (rec.xid, rec.host, rec.timestamp) == (79, None, None)
