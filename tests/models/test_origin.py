"""Only the kernel writes driver messages: a record's facility says who wrote it."""

from __future__ import annotations

import json

import pytest

from models.kernlog import KernelLogParser, parse_lines
from models.kernlog.origin import journal_origin, kmsg_origin, line_origin


@pytest.mark.parametrize(("priority", "kernel"), [
    (0, True), (3, True), (4, True), (7, True),  # kern.emerg .. kern.debug
    (8, False), (12, False), (14, False),  # user facility: `echo '<4>...' > /dev/kmsg` arrives as 12
    (30, False), (191, False), (-1, False),
])
def test_kmsg_records_of_the_kernel_facility_only(priority: int, kernel: bool) -> None:
    origin = kmsg_origin(priority)
    assert origin.kernel is kernel
    assert ("kernel facility" in origin.reason) is kernel


@pytest.mark.parametrize(("transport", "facility", "kernel"), [
    ("kernel", "0", True), ("kernel", 0, True), ("kernel", None, True),
    ("kernel", "1", False), ("kernel", "3", False),  # written into /dev/kmsg from user space
    ("syslog", "0", False), ("journal", "0", False), ("stdout", None, False), (None, "0", False),
])
def test_journal_entries_of_the_kernel_transport_and_facility_only(transport: object, facility: object,
                                                                     kernel: bool) -> None:
    assert journal_origin(transport, facility).kernel is kernel


AT = {"__REALTIME_TIMESTAMP": "1764064800000000"}
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."
KERNEL_LINES = [
    f"Nov 25 10:00:00 gpu-1 kernel: {XID79}",
    f"Nov 25 10:00:00 gpu-1 kernel: [ 1843.308145] {XID79}",
    f"Nov 25 10:00:00 kernel: {XID79}",
    f"2025-11-25T10:00:00.123456+00:00 gpu-1 kernel: {XID79}",
    f"<4>Nov 25 10:00:00 gpu-1 kernel: {XID79}",
    f"<4>1 2025-11-25T10:00:00Z gpu-1 kernel - - - {XID79}",
    f"4,1234,1843308145,-;{XID79}",
    f"[ 1843.308145] {XID79}",
    f"[Tue Nov 25 10:00:00 2025] {XID79}",
    f"2025-11-25T10:00:00,123456+00:00 {XID79}",
    XID79,
    json.dumps({"MESSAGE": XID79, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", **AT}),
    json.dumps({"MESSAGE": XID79, **AT}),  # an entry without trusted fields
]
FOREIGN_LINES = [
    f"Nov 25 10:00:00 gpu-1 alice: {XID79}",
    f"Nov 25 10:00:00 gpu-1 sshd[12]: Invalid user {XID79}",
    f"Nov 25 10:00:00 gpu-1 sshd[12]: Invalid user Nov 25 10:00:00 gpu-1 kernel: {XID79}",
    f"2025-11-25T10:00:00.123456+00:00 gpu-1 logger[99]: {XID79}",
    f"<12>Nov 25 10:00:00 gpu-1 kernel: {XID79}",  # facility user, whatever the tag says
    f"<13>1 2025-11-25T10:00:00Z gpu-1 alice - - - {XID79}",
    f"<12>1 2025-11-25T10:00:00Z gpu-1 kernel - - - {XID79}",
    f"12,1234,1843308145,-;{XID79}",
    json.dumps({"MESSAGE": XID79, "_TRANSPORT": "syslog", "SYSLOG_FACILITY": "1", **AT}),
    json.dumps({"MESSAGE": XID79, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "1", **AT}),
    json.dumps({"MESSAGE": XID79, "_TRANSPORT": "stdout", **AT}),
]


@pytest.mark.parametrize("line", KERNEL_LINES)
def test_kernel_lines_of_every_format_parse(line: str) -> None:
    assert line_origin(line).kernel
    records = list(parse_lines([line]))
    assert [(r.kind, r.xid) for r in records] == [("xid", 79)]


@pytest.mark.parametrize("line", FOREIGN_LINES)
def test_lines_user_space_wrote_never_parse(line: str) -> None:
    """A syslog tag other than `kernel`, a facility other than kern, a journal transport other than
    kernel: written by a process, not the driver (`logger -t alice`, an ssh login name)."""
    origin = line_origin(line)
    assert not origin.kernel and origin.reason
    parser = KernelLogParser()
    assert list(parser.parse([line])) == []
    assert parser.stats["foreign"] == 1


def test_a_foreign_line_never_joins_a_kernel_record() -> None:
    """The driver's three-line "fallen off the bus" notice cannot be completed by user space."""
    lines = ["Nov 25 10:00:00 gpu-1 kernel: NVRM: The NVIDIA GPU 0000:3b:00.0",
             "Nov 25 10:00:00 gpu-1 alice: NVRM: (PCI ID: 10de:2330) installed in this system has",
             "Nov 25 10:00:00 gpu-1 alice: NVRM: fallen off the bus and is not responding to commands."]
    assert list(parse_lines(lines)) == []
    kernel = [line.replace("alice:", "kernel:") for line in lines]
    assert [r.kind for r in parse_lines(kernel)] == ["gpu_fallen_off_bus"]
