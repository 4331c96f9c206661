#!/usr/bin/env python3
"""Worst-case parser time per hostile line. Prints one JSON object.

Each input is one line fed to a fresh parser (with an AER report open, so continuation matching
runs too), at several lengths up to 1 MiB: repeated tokens that made patterns backtrack (one `NVRM:`
line of repeated `GSP ` took 24 s at 64 KB), every other pattern fragment repeated after each
message prefix, deep parentheses and brackets, deeply nested journal JSON, digits of other scripts,
long digit runs. Times are wall-clock seconds of `feed` + `finish`, the best of --repeat runs of each
line; the target is < 0.05 s for every line up to 1 MiB.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.kernlog import KernelLogParser
from models.kernlog.limits import MAX_LINE_CHARS, MAX_MESSAGE_CHARS

SIZES = (MAX_MESSAGE_CHARS - 64, 8 * 1024, MAX_LINE_CHARS, 1024 * 1024)
TOKENS = {
    "repeated_tokens": [
        "GSP ", "Check failed ", "Assertion failed ", "vbios ", "MIG ", "libos ", "kbusX: ", "knvlink: ",
        "heartbeat ", "fail ", "error ", "NVLink training ", "Attempting to remove device ", "firmware load ",
        "nvAssert", "Memory Subsystem Error", "BAR0 is 1", "Links 1, ", "Link 1 and ", "GPU0 ", "_kgsp",
        "RPC history ",
    ],
    "repeated_anchors": [
        "NVRM", "NVRM: ", "NVRMNVRM: ", "SXid", "rror", "Xid (", "NVRM: Xid (", "NVRM: Xid (PCI:0000:3b:00): ",
        "NVRM: GPU at PCI:", "NVRM: GPU at PCI:0: ", "NVRM: The NVIDIA GPU ", "NVRM: GPU 0000:00:00.0 ",
        "NVRM: GPU 0000:00:00.0: GPU serial number is", "nvidia-nvswitch0: SXid (", "PCIe Bus Error: severity=",
        "AER: ", "0000:00:00.0 ", "GPU recovery action changed from 0x1 (", "MMU Fault: ENGINE a ",
        "(GPC 1, TPC 1", "pid=", "name=", ", ",
    ],
    "prefix_fragments": ["[", "[ 1", "[1.1 <1.", "<1>1 a b c d e [", "Jan 1 ", "2025-01-01 ", "<", "1,", "0:"],
    "deep_nesting": ["(", ")", "[", "]", "{", "{\"a\":", "[ 5] a", "<<"],
    "plain_text": ["a", " ", "\t", "0", "x" * 3 + " ", "0x", "\u00e9"],
    "other_digits": ["\u0667", "\uff17", "\u0967", "1\u0661"],
}
PREFIXES = ("", "NVRM: ", "NVRM: GPU 0000:3b:00.0: ", "NVRM: Xid (PCI:0000:3b:00): 13, ", "pcieport 0000:00:01.0: ",
            "pcieport 0000:00:01.0:    [ 5] ", "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, ", "[ 12.000000] ",
            "Nov 18 14:02:11 node kernel: ")
EXTRA = {
    "deep_json": ['{"MESSAGE":' + "[" * 100_000, '{"a":' * 100_000, '{"MESSAGE":"NVRM: ' + "GSP " * 1000 + '"}'],
    "long_digit_runs": ["NVRM: Xid (PCI:0000:3b:00): " + "9" * 4000 + ", x", "[" + "1" * 4000 + ".5] NVRM: x",
                        "6," + "9" * 4000 + ",1,-;NVRM: x"],
}


def _time(line: str, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        p = KernelLogParser()
        p.feed("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0")
        t0 = time.perf_counter()
        p.feed(line)
        p.finish()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    kinds: dict[str, dict[str, object]] = {}
    overall = (0.0, "")
    lines_timed = 0
    for kind, tokens in TOKENS.items():
        worst = (0.0, "")
        for token in tokens:
            for prefix in PREFIXES:
                for size in SIZES:
                    line = (prefix + token * (size // len(token) + 1))[:size]
                    dt = _time(line, args.repeat)
                    lines_timed += 1
                    worst = max(worst, (dt, f"{prefix!r} + {token!r} * n, {size} chars"))
        kinds[kind] = {"worst_s": round(worst[0], 6), "worst_input": worst[1]}
        overall = max(overall, worst)
    for kind, lines in EXTRA.items():
        worst = (0.0, "")
        for line in lines:
            dt = _time(line, args.repeat)
            lines_timed += 1
            worst = max(worst, (dt, f"{line[:40]!r}..., {len(line)} chars"))
        kinds[kind] = {"worst_s": round(worst[0], 6), "worst_input": worst[1]}
        overall = max(overall, worst)
    print(json.dumps({
        "benchmark": "hostile_parse",
        "python": platform.python_version(),
        "lines_timed": lines_timed,
        "max_line_chars_tried": max(SIZES),
        "kinds": kinds,
        "worst_s": round(overall[0], 6),
        "worst_input": overall[1],
        "target_s_max": 0.05,
        "meets_target": overall[0] < 0.05,
    }, indent=2))


if __name__ == "__main__":
    main()
