"""Hostile input: digits of other scripts, numbers out of range, overlong lines, lines built to make a
pattern backtrack. None of them is a record, raises, or costs more than linear time."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.kernlog import KernelLogParser, ParseOptions
from models.kernlog.limits import MAX_LINE_CHARS, MAX_MESSAGE_CHARS, PID_MAX, TRUNCATED_MARK
from models.kernlog.lines import cut_line, split_lines
from xidpipe.commands._input import iter_lines

OPTS = ParseOptions(year=2025, now=datetime(2025, 12, 20, tzinfo=UTC))
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def parse(lines: list[str]) -> tuple[list[dict[str, object]], dict[str, int]]:
    p = KernelLogParser(OPTS)
    records = [r.to_dict() for r in p.parse(lines)]
    return records, p.stats


def test_the_plain_line_is_a_record() -> None:
    records, _ = parse([f"[ 12.5] {XID79}"])
    assert [(r["xid"], r["pid"]) for r in records] == [(79, 1234)]


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:3b:00): \u0667\u0669, pid=1234, name=python3, GPU has fallen off the bus.",  # Arabic-Indic
    "NVRM: Xid (PCI:0000:3b:00): \uff17\uff19, pid=1234, name=python3, GPU has fallen off the bus.",  # full-width
    "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): \u0661\u0662\u0660\u0662\u0668, Non-fatal, Link 32",
    "[ \u0661\u0662.5] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0xffff:667)",
])
def test_digits_of_other_scripts_are_never_numbers(line: str) -> None:
    records, _ = parse([line])
    assert all(r["kind"] not in ("xid", "sxid", "gpu_fallen_off_bus") for r in records)
    assert all(r["uptime_s"] is None for r in records)


@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:3b:00): 0, pid=1, name=a, x",
    "NVRM: Xid (PCI:0000:3b:00): 1000, pid=1, name=a, x",
    "NVRM: Xid (PCI:0000:3b:00): " + "9" * 36 + ", pid=1, name=a, x",
    "NVRM: Xid (PCI:0000:3b:00): " + "7" * 4050 + ", x",  # a message as long as a line may be
    "[100000000000000000000.000000] " + XID79,  # uptime 1e20 s
    "[316224001.000000] " + XID79,  # uptime just past ten years (of 366 days)
    "6,1," + "9" * 20 + ",-;" + XID79,  # kmsg time past ten years
    "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 9999, Non-fatal, Link 32",
    "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 100000, Non-fatal, Link 32",
    "pcieport 0000:60:ff.0: AER: Uncorrected (Fatal) error received: 0000:63:00.0",
    '{"MESSAGE":"' + XID79 + '","_SOURCE_MONOTONIC_TIMESTAMP":"' + "9" * 19 + '"}',
])
def test_a_number_out_of_range_makes_the_line_no_record(line: str) -> None:
    records, stats = parse([line])
    assert records == []
    assert stats["rejected"] == 1


@pytest.mark.parametrize(("line", "field", "text"), [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=-1, name=a, GPU has fallen off the bus.", "pid", "-1"),
    (f"NVRM: Xid (PCI:0000:3b:00): 79, pid={PID_MAX + 1}, name=a, GPU has fallen off the bus.", "pid",
     str(PID_MAX + 1)),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=" + "1" * 23 + ", name=a, GPU has fallen off the bus.", "pid", "1" * 23),
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=\u0661\u0662, name=a, GPU has fallen off the bus.", "pid", "\u0661\u0662"),
    ("NVRM: Xid (PCI:0000:3b:20): 79, pid=1, name=a, GPU has fallen off the bus.", "pci", "PCI:0000:3b:20"),
])
def test_a_neighbouring_field_out_of_range_costs_the_field_not_the_code(line: str, field: str, text: str) -> None:
    """The Xid code is the fault: a pid or PCI address that does not read is left empty and kept,
    as printed, in `details.invalid`; no number out of range reaches the record."""
    records, stats = parse([line])
    assert [(r["xid"], r[field], r["details"]["invalid"]) for r in records] == [(79, None, {field: text})]
    assert stats["rejected"] == 0


def test_ranges_keep_their_edges() -> None:
    records, _ = parse([
        f"NVRM: Xid (PCI:0000:3b:1f): 999, pid={PID_MAX}, name=a, x",
        "[315000000.000000] NVRM: Xid (PCI:0000:3b:00): 1, pid=0, name=a, x",
        "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 10000, Non-fatal, Link 32",
    ])
    assert [(r["kind"], r["xid"] or r["sxid"], r["pid"]) for r in records] == [
        ("xid", 999, PID_MAX), ("xid", 1, 0), ("sxid", 10000, None)]


def test_a_broken_batch_keeps_its_good_records() -> None:
    lines = ["NVRM: Xid (PCI:0000:3b:00): " + "9" * 36 + ", pid=1, name=a, x", XID79,
             f"NVRM: Xid (PCI:0000:3b:00): 79, pid={10 ** 23}, name=a, x", XID79.replace("3b", "3c")]
    records, stats = parse(lines)
    assert [(r["line"], r["pci"], r["pid"]) for r in records] == [
        (2, "0000:3b:00.0", 1234), (3, "0000:3b:00.0", None), (4, "0000:3c:00.0", 1234)]
    assert stats["rejected"] == 1


def test_overlong_lines_are_no_records_and_cut_lines_neither() -> None:
    padded = "x" * MAX_MESSAGE_CHARS + " " + XID79
    huge_json = '{"MESSAGE":"' + XID79 + '","PAD":"' + "x" * MAX_LINE_CHARS + '"}'
    cut = cut_line("[ 1.0] " + XID79 + " " + "y" * MAX_LINE_CHARS)
    piece = "[ 1.0] " + XID79 + TRUNCATED_MARK  # the end of a line a reader cut into pieces
    records, stats = parse([padded, huge_json, cut, piece, XID79])
    assert [r["line"] for r in records] == [5]
    assert stats["overlong"] == 4


def test_a_journal_entry_nested_past_the_recursion_limit_is_no_record() -> None:
    records, _ = parse(["[" * 200_000, '{"a":' * 100_000, XID79])
    assert [r["line"] for r in records] == [3]


HOSTILE_TOKENS = [
    "GSP ", "Check failed ", "vbios ", "MIG ", "libos ", "kbusX: ", "knvlink: ", "heartbeat ", "fail ",
    "NVLink training ", "Attempting to remove device ", "firmware load ", "nvAssert", "Xid (",
    "NVRM: Xid (", "NVRM: GPU at PCI:", "NVRM: GPU 0000:00:00.0 ", "NVRM: The NVIDIA GPU ",
    "PCIe Bus Error: severity=", "GPU recovery action changed from 0x1 (", "MMU Fault: ENGINE a ",
    "(GPC 1, TPC 1", "[ 5] a", "[1.1 <1.", "<1>1 a b c d e [", "Links 1, ", "a", " ", "(", "[", "0:",
    "NVRM: GPU 0000:00:00.0: GPU serial number is", "\u0667",
]
PREFIXES = ["NVRM: ", "NVRM: GPU 0000:3b:00.0: ", "NVRM: Xid (PCI:0000:3b:00): 13, ", "pcieport 0000:00:01.0: ",
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, ", "[ 12.0] ", ""]


def _worst_seconds(line: str) -> float:
    best = float("inf")
    for _ in range(3):  # the best of three: a busy machine delays, it never speeds up
        p = KernelLogParser(OPTS)
        p.feed("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0")  # an open AER report
        t0 = time.perf_counter()
        p.feed(line)
        p.finish()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.parametrize("token", HOSTILE_TOKENS)
def test_repeated_tokens_cost_linear_time(token: str) -> None:
    for size in (MAX_MESSAGE_CHARS - 64, 64 * 1024, 1024 * 1024):
        for prefix in PREFIXES:
            line = (prefix + token * (size // len(token)))[:size]
            assert _worst_seconds(line) < 0.05, (token, prefix, size)


def test_the_reported_gsp_line_is_fast_at_every_size() -> None:
    # One NVRM line of repeated "GSP " took 0.8 s at 8 KB and 24 s at 64 KB.
    for size in (4000, 8 * 1024, 32 * 1024, 64 * 1024):
        assert _worst_seconds("NVRM: " + "GSP " * (size // 4)) < 0.05


def test_cli_input_holds_every_line_to_the_bound(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] " + "z" * (3 * MAX_LINE_CHARS) + " " + XID79 + "\n" + XID79 + "\r\n" + XID79)
    lines = list(iter_lines(str(log)))
    assert [len(x) for x in lines] == [MAX_LINE_CHARS + len(TRUNCATED_MARK), len(XID79), len(XID79)]
    assert lines[0].endswith(TRUNCATED_MARK)
    records, _ = parse(lines)
    assert [r["line"] for r in records] == [2, 3]


@settings(max_examples=300)
@given(text=st.text(alphabet="ab\n\u0667", max_size=80), cuts=st.lists(st.integers(0, 80), max_size=6),
       bound=st.integers(1, 12))
def test_split_lines_equals_splitting_the_whole_text_and_cutting(text: str, cuts: list[int], bound: int) -> None:
    edges = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    chunks = [text[a:b] for a, b in pairwise(edges)]
    whole = text[:-1].split("\n") if text.endswith("\n") else text.split("\n") if text else []
    assert list(split_lines(chunks, bound)) == [cut_line(x, bound) for x in whole]
