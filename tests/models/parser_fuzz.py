"""Coverage-guided fuzzing of the kernel-log parser (atheris / libFuzzer), run by test_parser_fuzz.py.

    python tests/models/parser_fuzz.py [libFuzzer flags] [SEED_DIR]

Each input is decoded as UTF-8 (invalid bytes replaced) and fed as lines, after the real line the
first input byte picks from the seeds, to `parse()` and line by line to `feed()`. A finding is any
exception, a record whose numbers are out of their range or whose Xid/SXid code is not written in
ASCII digits in its own lines, the two APIs disagreeing, or more than FUZZ_LINE_BUDGET_S seconds.
"""

from __future__ import annotations

import sys
import time

import atheris

with atheris.instrument_imports():
    from models.kernlog import FaultRecord, KernelLogParser, ParseOptions
    from models.kernlog.limits import PCI_DEVICE_MAX, PID_MAX, SXID_RANGE, UPTIME_MAX_S, XID_RANGE

OPTS = ParseOptions(year=2025)
FUZZ_LINE_BUDGET_S = 0.05  # per line fed, on top of a fixed allowance for the instrumented interpreter
SEEDS = [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    "pcieport 0000:60:01.1: AER: Uncorrected (Fatal) error received: 0000:63:00.0",
    "NVRM: GPU at PCI:0000:3b:00: GPU-2b7e9c4a-1111-2222-3333-444455556666",
]


def check(records: list[FaultRecord], lines: list[str]) -> None:
    for r in records:
        text = "\n".join(lines[r.line - 1:r.line_end])
        if r.xid is not None:
            assert XID_RANGE[0] <= r.xid <= XID_RANGE[1] and str(r.xid) in text, r
        if r.sxid is not None:
            assert SXID_RANGE[0] <= r.sxid <= SXID_RANGE[1] and str(r.sxid) in text, r
        assert r.pid is None or 0 <= r.pid <= PID_MAX, r
        assert r.uptime_s is None or 0 <= r.uptime_s <= UPTIME_MAX_S, r
        for address in (r.pci, r.source_pci):
            assert address is None or int(address[-4:-2], 16) <= PCI_DEVICE_MAX, r


def one_input(data: bytes) -> None:
    if not data:
        return
    lines = [SEEDS[data[0] % len(SEEDS)], *data[1:].decode("utf-8", "replace").split("\n")]
    t0 = time.perf_counter()
    parsed = list(KernelLogParser(OPTS).parse(lines))
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.5 + FUZZ_LINE_BUDGET_S * len(lines), (elapsed, len(lines))
    p = KernelLogParser(OPTS)
    fed = [r for line in lines for r in p.feed(line)] + p.finish()
    if not any(line[:1] == "{" for line in lines):  # feed() reads a `{` line as journal JSON, parse() as text
        assert [r.to_dict() for r in fed] == [r.to_dict() for r in parsed]
    check(parsed, lines)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
