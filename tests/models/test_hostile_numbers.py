"""The driver prints its codes with `%d`: a code with a leading zero (`079`) is no Xid 79, and no record
at all (counted as rejected); a pid with one is an invalid field of a record that keeps its code."""

from __future__ import annotations

import pytest

from models.kernlog import KernelLogParser

LINES = [
    "NVRM: Xid (PCI:0000:3b:00): 079, pid=1234, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 0079, pid=1234, name=python3, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:3b:00): 013, pid=1234, name=python3, Graphics Exception",
    "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 012028, Non-fatal, Link 4 egress non-posted PRIV error",
]


@pytest.mark.parametrize("line", LINES)
def test_numbers_with_a_leading_zero_are_no_record(line: str) -> None:
    parser = KernelLogParser()
    assert list(parser.parse([f"[ 100.000000] {line}"])) == []
    assert parser.stats["rejected"] == 1


def test_a_pid_with_a_leading_zero_is_an_invalid_field_and_the_code_survives() -> None:
    line = "NVRM: Xid (PCI:0000:3b:00): 13, pid=01234, name=python3, Graphics Exception"
    (rec,) = KernelLogParser().parse([f"[ 100.000000] {line}"])
    assert (rec.xid, rec.pid, rec.details["invalid"]) == (13, None, {"pid": "01234"})


@pytest.mark.parametrize(("line", "code"), [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.", 79),
    ("NVRM: Xid (PCI:0000:3b:00): 13, pid=0, name=python3, Graphics Exception", 13),
])
def test_the_same_lines_as_the_driver_prints_them_parse(line: str, code: int) -> None:
    assert [r.xid for r in KernelLogParser().parse([f"[ 100.000000] {line}"])] == [code]
