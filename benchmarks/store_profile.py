#!/usr/bin/env python3
"""Where the store process's time goes, per record kind, under the fleet bench's load. Prints one JSON object.

Drives the intake (`streams.intake.Intake`, as the worker's store process runs it) in this process,
without Kafka, on a throwaway PostgreSQL with the fleet bench's configuration (or --database-url), with
the records of `benchmarks/fleet_sim.py`'s simulated fleet (--nodes × 8 GPUs: the start spread over
18 s, inventories, job changes, GPU health heartbeats, owner changes, background kernel lines and Xids
at the fleet bench's rates and, at two thirds of --fleet-s, the burst), in batches of --batch messages:
the size the worker's adaptive batches reach at the bench's rate. The first --warmup-s simulated
seconds (every node's first snapshots) are stored unprofiled; the rest runs under cProfile.

Reports, for the profiled part:
- `ms_per_record`: the intake's wall time per message, and `records_per_s`, the rate one store
  process takes the mix at when nothing else waits (the worker's ceiling on this machine);
- `per_kind`: the records of each kind, and the time of the code that handles them (cProfile's
  cumulative time of that code's entry points) per record of the kind: decoding and parsing every
  message, storing state snapshots by kind (inventories with the GPU ledger, pod assignments with
  their owners, processes, owner changes), faults (deduplication, attribution, grouping, the
  incident rows, classification and the outbox, of which the fleet count), the commit;
- `top_tottime` / `top_cumtime`: the --top functions by their own time and by cumulative time, in
  ms per record.

    .venv/bin/python benchmarks/store_profile.py                 # 2,000 nodes, 120 simulated seconds
    .venv/bin/python benchmarks/store_profile.py --nodes 2000 --fleet-s 180 --batch 200
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import platform
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet_sim import Fleet
from benchmarks.worker_memory_bench import Feeder
from models.topics import topology
from streams.intake import Intake
from streams.items import ParserBounds
from streams.store import Store

# Phases of the store: (name, (file suffix, function name) entry points whose cumulative time it is).
PHASES: dict[str, tuple[tuple[str, str], ...]] = {
    "decode_parse": (("streams/intake.py", "_prepare"),),
    "state_all": (("streams/store.py", "_states"),),
    "state_inventory_ledger": (("history/ledger_store.py", "apply_inventories"),),
    "state_pod_owners": (("streams/store.py", "_owners"),),
    "faults_dedup": (("streams/store.py", "_new_faults"),),
    "faults_late_state": (("streams/grouping.py", "repair"),),
    "faults_grouping": (("streams/grouping.py", "faults"),),
    "faults_classify_outbox": (("streams/grouping.py", "finish"),),
    "faults_fleet_count": (("streams/fleet.py", "count"),),
    "evidence": (("streams/store.py", "_evidence"),),
    "commit": (("sqlalchemy/orm/session.py", "commit"),),
    "intake_total": (("streams/intake.py", "handle"),),
}
# Which message kinds a phase's time is divided by.
PHASE_KINDS: dict[str, tuple[str, ...]] = {
    "decode_parse": ("*",),
    "state_all": ("inventory", "pod_assignments", "gpu_processes", "pod_workloads"),
    "state_inventory_ledger": ("inventory",),
    "state_pod_owners": ("pod_assignments",),
    "faults_dedup": ("fault", "burst_fault"),
    "faults_late_state": ("inventory", "pod_assignments", "gpu_processes", "pod_workloads"),
    "faults_grouping": ("fault", "burst_fault"),
    "faults_classify_outbox": ("fault", "burst_fault"),
    "faults_fleet_count": ("fault", "burst_fault"),
    "evidence": ("evidence",),
    "commit": ("*",),
    "intake_total": ("*",),
}


def _where(key: tuple[str, int, str]) -> str:
    path, line, name = key
    short = "/".join(Path(path).parts[-2:]) if path not in ("~", "") else path
    return f"{short}:{line}({name})"


def phase_times(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds of each phase's entry points (a recursive entry counted once by cProfile)."""
    out = dict.fromkeys(PHASES, 0.0)
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    for (path, _line, name), (_cc, _nc, _tt, ct, _callers) in raw.items():
        for phase, entries in PHASES.items():
            if any(path.endswith(suffix) and name == fn for suffix, fn in entries):
                out[phase] += ct
    return out


def top(stats: pstats.Stats, sort: int, n: int, records: int) -> list[str]:
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    rows = sorted(raw.items(), key=lambda kv: kv[1][sort], reverse=True)[:n]
    return [f"{v[sort] * 1000 / records:.3f} ms/rec {v[1]} calls {_where(k)}" for k, v in rows]


def run(args: argparse.Namespace) -> dict[str, Any]:
    topo = topology()
    kinds = {t.name: k for t in topo.inputs if (k := topo.kinds_for(t.name))}
    store = Store(args.database_url)
    store.create_schema()
    intake = Intake(store, kinds, ParserBounds())
    feeder = Feeder(intake, args.batch, 12)
    fleet = Fleet(args.nodes)
    fleet.schedule_start(0.0, spread_s=0.6 * args.warmup_s)
    profiler = cProfile.Profile()
    counted: dict[str, int] = {}
    t, burst_at, burst_done = 0.0, args.warmup_s + (args.fleet_s - args.warmup_s) * 2 / 3, False
    wall = 0.0
    while t < args.fleet_s:
        t = round(t + 0.1, 1)
        before = dict(fleet.counts)
        records = list(fleet.due(t))
        if t >= burst_at and not burst_done:
            burst_done = True
            records.extend(fleet.burst())
        profiled = t > args.warmup_s
        if profiled:
            for k, v in fleet.counts.items():
                counted[k] = counted.get(k, 0) + v - before.get(k, 0)
        for rec in records:
            if len(feeder.pending) + 1 >= args.batch and profiled:
                began = time.perf_counter()
                profiler.enable()
                feeder.add(rec)
                profiler.disable()
                wall += time.perf_counter() - began
            else:
                feeder.add(rec)
        if t >= args.warmup_s and not profiled:
            feeder.flush()
            feeder.messages = 0
    began = time.perf_counter()
    profiler.enable()
    feeder.flush()
    profiler.disable()
    wall += time.perf_counter() - began
    messages = feeder.messages
    stats = pstats.Stats(profiler)
    phases = phase_times(stats)
    total_records = max(1, messages)
    per_kind: dict[str, dict[str, float]] = {}
    for phase, seconds in phases.items():
        divide = PHASE_KINDS[phase]
        n = total_records if divide == ("*",) else sum(counted.get(k, 0) for k in divide)
        per_kind[phase] = {"ms_total": round(seconds * 1000, 1), "records": n,
                           "ms_per_record": round(seconds * 1000 / n, 3) if n else 0.0}
    result = {
        "nodes": args.nodes, "simulated_s": args.fleet_s, "warmup_s": args.warmup_s, "batch": args.batch,
        "messages_profiled": messages, "records_by_kind": counted,
        "wall_s": round(wall, 2), "ms_per_record": round(wall * 1000 / total_records, 3),
        "records_per_s": round(total_records / wall, 0) if wall else None,
        "per_kind": per_kind,
        "top_tottime": top(stats, 2, args.top, total_records),
        "top_cumtime": top(stats, 3, args.top, total_records),
        "python": platform.python_version(),
    }
    store.dispose()
    return result


def main() -> None:
    logging.disable(logging.WARNING)  # the incidents it opens are not the point here
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--fleet-s", type=float, default=120.0, help="simulated seconds of the fleet")
    ap.add_argument("--warmup-s", type=float, default=30.0, help="simulated seconds stored before profiling")
    ap.add_argument("--batch", type=int, default=200, help="messages per transaction")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--database-url", default=None, help="a database to use (default: a throwaway PostgreSQL)")
    args = ap.parse_args()
    if args.fleet_s <= args.warmup_s:
        raise SystemExit("--fleet-s must be longer than --warmup-s")
    postgres = None
    if not args.database_url:
        from benchmarks.fleet_measure import BenchPostgres

        postgres = BenchPostgres().start()
        args.database_url = postgres.url
    try:
        print(json.dumps(run(args), indent=1))
    finally:
        if postgres is not None:
            postgres.stop()


if __name__ == "__main__":
    main()
