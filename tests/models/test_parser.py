"""Table-driven tests of the kernel-log parser on the fixture corpus."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from models.kernlog import CONTRACT_FIELDS, FaultRecord, KernelLogParser, ParseOptions, parse_lines
from tests.models.kernlog_corpus import PREFIX_CASES, RECORD_CASES, PrefixCase, RecordCase

OPTS = ParseOptions(year=2025, now=datetime(2025, 12, 20, tzinfo=UTC))


def parse(lines: list[str]) -> list[FaultRecord]:
    return list(parse_lines(lines, OPTS))


def assert_subset(actual: dict[str, Any], expect: dict[str, Any]) -> None:
    for key, want in expect.items():
        got = actual[key]
        if isinstance(want, dict):
            assert isinstance(got, dict), key
            assert_subset(got, want)
        else:
            assert got == want, f"{key}: {got!r} != {want!r}"


@pytest.mark.parametrize("case", PREFIX_CASES, ids=lambda c: c.name)
def test_every_prefix_form(case: PrefixCase) -> None:
    records = parse([case.line])
    assert len(records) == 1, case.source
    d = records[0].to_dict()
    assert d["kind"] == "xid" and d["xid"] == 79 and d["pci"] == "0000:3b:00.0"
    assert d["pid"] == 1234 and d["process"] == "python3"
    assert d["message"] == "GPU has fallen off the bus."
    assert d["raw"] == case.line
    assert_subset(d, case.expect)


@pytest.mark.parametrize("case", RECORD_CASES, ids=lambda c: c.name)
def test_record_kinds(case: RecordCase) -> None:
    records = parse(case.lines)
    assert len(records) == len(case.expect), [r.to_dict() for r in records]
    for record, expect in zip(records, case.expect, strict=True):
        assert_subset(record.to_dict(), expect)


def test_output_fields_are_the_public_contract() -> None:
    (record,) = parse([PREFIX_CASES[0].line])
    keys = list(record.to_dict())
    assert keys[: len(CONTRACT_FIELDS)] == list(CONTRACT_FIELDS)
    assert CONTRACT_FIELDS == (
        "line", "line_end", "kind", "timestamp", "uptime_s", "host", "pci", "source_pci", "xid", "sxid", "pid",
        "process", "message", "gpu_uuid", "serial", "mnemonic", "immediate_action", "category",
        "catalog_version", "raw",
    )


def test_line_numbers_count_every_input_line() -> None:
    lines = ["noise"] * 5 + [PREFIX_CASES[0].line] + ["more noise"] * 3 + [PREFIX_CASES[1].line]
    assert [r.line for r in parse(lines)] == [6, 10]


def test_multiline_record_interrupted_by_unrelated_lines_still_merges() -> None:
    lines = [
        "NVRM: The NVIDIA GPU 0000:63:00.0",
        "EXT4-fs (nvme0n1p2): re-mounted.",
        "NVRM: (PCI ID: 10de:2330) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ]
    (rec,) = parse(lines)
    assert (rec.kind, rec.line, rec.line_end) == ("gpu_fallen_off_bus", 1, 4)


def test_identity_line_without_serial_then_an_xid() -> None:
    lines = [
        "NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666",
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=a, Graphics Exception",
    ]
    ident, xid = parse(lines)
    assert ident.kind == "gpu_identity" and ident.serial is None and ident.line_end == 1
    assert xid.kind == "xid" and xid.line == 2


def test_aer_from_root_port_of_known_gpu_is_kept() -> None:
    lines = [
        "NVRM: Xid (PCI:0000:63:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "pcieport 0000:60:01.1: AER: Uncorrected (Non-Fatal) error received: 0000:63:00.0",
    ]
    _xid, aer = parse(lines)
    assert aer.kind == "pcie_aer" and aer.source_pci == "0000:63:00.0"
    assert aer.details["severity"] == "non-fatal"


@pytest.mark.parametrize(("below", "kept"), [
    ("nvidia 0000:02:00.0: device has no AER-aware driver", True),
    ("nvidia 0000:02:00.0: AER: can't recover (no error_detected callback)", True),
    ("ahci 0000:02:00.0: AER: can't recover (no error_detected callback)", False),
])
def test_port_report_is_a_gpus_when_recovery_names_an_nvidia_device_below(below: str, kept: bool) -> None:
    lines = [
        "pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: 0000:00:02.0",
        "pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
        "pcieport 0000:00:02.0:    [ 5] SDES                   (First)",
        "pcieport 0000:00:02.0: broadcast error_detected message",
        below,
        "pcieport 0000:00:02.0: AER: Root Port link has been reset (0)",
        # A later report from the same port is the GPU's too, with no recovery line of its own.
        "pcieport 0000:00:02.0: AER: Corrected error received: 0000:00:02.0",
    ]
    records = parse(lines)
    if not kept:
        assert records == []
        return
    fatal, corrected = records
    assert (fatal.kind, fatal.pci, fatal.line, fatal.line_end) == ("pcie_aer", "0000:00:02.0", 1, 6)
    assert fatal.details["affected"] == ["0000:02:00.0"] and fatal.details["errors"] == ["SDES"]
    assert corrected.line == 7 and corrected.details["severity"] == "corrected"


def test_stream_feed_returns_records_as_soon_as_they_are_complete() -> None:
    p = KernelLogParser(OPTS)
    assert [r.xid for r in p.feed("NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=a, Graphics Exception")] == [13]
    # An identity line may be followed by its serial number: it is held until the next line says.
    assert p.feed("NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666") == []
    assert p.feed("NVRM: GPU Board Serial Number: 42") == []
    out = p.feed("NVRM: Xid (PCI:0000:3b:00): 43, pid=7, name=a, Ch 00000010")
    assert [(r.kind, r.serial) for r in out] == [("gpu_identity", "42"), ("xid", None)]
    assert p.finish() == []


def test_held_record_is_released_after_a_gap_of_unrelated_lines() -> None:
    p = KernelLogParser(OPTS)
    assert p.feed("NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666") == []
    released = [r for i in range(20) for r in p.feed(f"unrelated line {i}")]
    assert [r.kind for r in released] == ["gpu_identity"]


def test_yearless_timestamp_in_the_future_belongs_to_the_previous_year() -> None:
    opts = ParseOptions(now=datetime(2026, 1, 2, tzinfo=UTC))
    (rec,) = parse_lines([f"Dec 31 23:59:59 n1 kernel: {PREFIX_CASES[0].line}"], opts)
    assert rec.timestamp == "2025-12-31T23:59:59"


def test_invalid_dates_do_not_crash_or_invent_a_time() -> None:
    (rec,) = parse([f"Feb 30 10:00:00 n1 kernel: {PREFIX_CASES[0].line.split('] ', 1)[1]}"])
    assert rec.timestamp is None and rec.xid == 79
