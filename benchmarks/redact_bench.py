#!/usr/bin/env python3
"""Redaction time over hostile text, and how long it holds up other threads. Prints one JSON object.

Each input is one unit repeated to each size up to 1 MiB (`models.redact.redact`), as one line and
as lines of 100 characters: the units that made patterns backtrack (`token` * 40,000 took 197 s at
200 KB; a 32 KB argument 4.4 s), the start of every rule without its end, quotes and separators,
and secrets of every kind back to back. Also `redact_argv` of a command line of the largest size.
While each input is redacted a ticker thread wakes every 10 ms; `max_stall_s` is the most it woke
late (the regex engine holds the interpreter for the length of one call, so this is the longest
single call into it, plus the interpreter's switch interval of 5 ms); `idle_max_stall_s` is the same
ticker's largest stall while the main thread sleeps, what the machine's own load costs it. `seconds` are wall-clock,
`cpu_seconds` the process's CPU time (what other load on a shared machine barely changes), each the
best of --repeat runs; the load average at the start and end is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.redact import redact, redact_argv

SIZES = (10 * 1024, 100 * 1024, 1024 * 1024)
UNITS = [
    "token", "password", "passw", "secret_", "a-", "x.", "a:", "a=", "a:b ", "--pass ", "-u ", "-u a:", "token=\"",
    "password=\"", "'", "\"", "\\", "mysql ", "mysql -p", "sshpass ", "sshpass -v ", "password ", "bearer ",
    "Authorization: ", "eyJ", "eyJabcdefgh.", "ghp_", "github_pat_", "AKIA", "ASIA", "xapp-1-", "xoxb-", "sk_live_",
    "AIza", "npm_", "x://", "x://a:", "x://a:b c", "@", ":@", "hooks.slack.com/services/", "AccountKey=", "sig=",
    "-----BEGIN ", "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----",
    "password=hunter2 ghp_" + "a" * 36 + " postgresql://u:p w@db AKIA" + "A" * 16 + " ",
]


class Ticker:
    """A thread that wakes every `interval` seconds and records the most it woke late."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.max_late = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        due = time.perf_counter()
        while not self._stop.is_set():
            due += self.interval
            time.sleep(max(0.0, due - time.perf_counter()))
            now = time.perf_counter()
            self.max_late = max(self.max_late, now - due)
            due = max(due, now - self.interval)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(call: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(best wall seconds, best CPU seconds, the ticker's largest stall over all runs)."""
    best = best_cpu = float("inf")
    with Ticker() as ticker:
        time.sleep(0.05)
        for _ in range(repeat):
            started, started_cpu = time.perf_counter(), time.process_time()
            call()
            best = min(best, time.perf_counter() - started)
            best_cpu = min(best_cpu, time.process_time() - started_cpu)
    return best, best_cpu, ticker.max_late


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(str(s) for s in SIZES), help="comma-separated sizes in bytes")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    load_before = os.getloadavg()[0]
    rows = []
    for unit in UNITS:
        for layout in ("one_line", "lines_of_100"):
            for size in sizes:
                text = unit * (size // len(unit) + 1)
                text = text[:size]
                if layout == "lines_of_100":
                    text = "\n".join(text[i : i + 99] for i in range(0, len(text), 99))
                took, cpu, stall = measure(lambda t=text: redact(t), args.repeat)
                rows.append({"unit": unit[:40], "layout": layout, "bytes": size, "seconds": round(took, 4),
                             "cpu_seconds": round(cpu, 4), "mb_per_s": round(size / took / 1e6, 1) if took else None,
                             "max_stall_s": round(stall, 4)})
    big = sizes[-1]
    argv = ["python3", "train.py", "--token", "token" * (big // 10), "token" * (big // 10)]
    argv_took, argv_cpu, argv_stall = measure(lambda: redact_argv(argv), args.repeat)
    _, _, idle_stall = measure(lambda: time.sleep(1.0), args.repeat)  # what the machine's load alone costs
    worst = max(rows, key=lambda r: r["cpu_seconds"])
    print(json.dumps({
        "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)], "repeat": args.repeat,
        "worst_seconds_by_size": {size: max(r["seconds"] for r in rows if r["bytes"] == size) for size in sizes},
        "worst_cpu_seconds_by_size": {size: max(r["cpu_seconds"] for r in rows if r["bytes"] == size)
                                      for size in sizes},
        "worst": worst,
        "max_stall_s": {layout: max(r["max_stall_s"] for r in rows if r["layout"] == layout)
                        for layout in ("one_line", "lines_of_100")},
        "idle_max_stall_s": round(idle_stall, 4),
        "argv": {"bytes": sum(len(a) for a in argv), "seconds": round(argv_took, 4), "cpu_seconds": round(argv_cpu, 4),
                 "max_stall_s": round(argv_stall, 4)},
        "inputs": rows,
    }, indent=1))


if __name__ == "__main__":
    main()
