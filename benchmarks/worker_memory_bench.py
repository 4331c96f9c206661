#!/usr/bin/env python3
"""Worker memory per 1,000 nodes. Prints one JSON object.

Drives the intake (`streams.intake.Intake`, as the worker's store process runs it) in this process,
without Kafka, on a SQLite database in a temporary directory (or --database-url): --nodes nodes
(default 2,000) × 8 GPUs, each publishing its GPU inventory and pod assignments, then --lines GPU
kernel lines (default 300: driver banners, persistence mode, each GPU's identity and serial number,
the lines the agent's pre-filter forwards from a healthy node), and one node in --fault-every
(default 20) an Xid 13 and an Xid 79 with its "fallen off the bus" lines. The lines arrive
interleaved across nodes, in batches of --batch messages, as a busy worker receives them.

Reports the process's resident memory (RSS, from /proc) and the bytes Python holds (tracemalloc,
unless --no-tracemalloc) at each phase: before any node, after the node state, in steady state after
the lines, and after the nodes went quiet past the parsers' idle expiry (--node-idle-s) and the
intake's `flush_idle` ran, each minus the first as MB per 1,000 nodes. Target: ≤ 50 MB of worker RSS per 1,000
nodes. Run it with --nodes 2000 and --nodes 10000.

With --fleet-s S it drives the intake instead with the records of `benchmarks/fleet_bench.py`'s simulated
fleet (`benchmarks/fleet_sim.py`: inventories, job changes, background lines, Xids at the bench's rates,
the start spread over 18 s and, at two thirds of S, the burst) for S simulated seconds, fed as fast as the
intake takes them, and reports the memory before the first record, after the 30 s warm-up and at the end
(MB per 1,000 nodes at the end, since the start and since the warm-up), the sizes of the store's caches,
and (--top N) the N allocation sites (file:line) that grew most from the start to the end. --postgres starts a
throwaway PostgreSQL for it, the database the fleet bench's workers use.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import platform
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fleet_sim import Fleet
from models.node_records import (
    DeviceAssignment,
    GpuInfo,
    GpuInventory,
    KernelLine,
    NodeRecordBase,
    PodAssignments,
    encode_node_record,
)
from models.topics import topology
from models.wire import topic_for
from streams.intake import Intake, Message
from streams.items import ParserBounds
from streams.store import Store
from tests import store_reads

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GPUS = 8


def pci(g: int) -> str:
    return f"0000:{0x18 + 0x20 * g:02x}:00.0"


def uuid(n: int, g: int) -> str:
    return f"GPU-{n:08x}-0000-4000-8000-{g:012d}"


def state(n: int) -> list[NodeRecordBase]:
    node = f"node-{n:05d}"
    gpus = tuple(GpuInfo(index=g, uuid=uuid(n, g), pci_bus_id=f"0000{pci(g).upper()}", serial=f"1654923{n:06d}{g}",
                         name="NVIDIA H100 80GB HBM3") for g in range(GPUS))
    pods = tuple(DeviceAssignment(device_id=uuid(n, g), gpu_id=uuid(n, g), resource_name="nvidia.com/gpu",
                                  namespace=f"team-{n % 40}", pod=f"train-{n // 8}-{g}", container="main")
                 for g in range(GPUS))
    return [GpuInventory(node=node, record_id=f"inv:{node}", emitted_at=T0, gpus=gpus),
            PodAssignments(node=node, record_id=f"pods:{node}", emitted_at=T0, changed_at=T0, assignments=pods)]


def background(n: int, i: int) -> list[str]:
    """The `i`th group of GPU lines a healthy node's agent forwards (one to two lines)."""
    g = i % GPUS
    k = i % 6
    if k == 0:
        return [f"NVRM: GPU at PCI:{pci(g)[:-2]}: {uuid(n, g)}", f"NVRM: GPU Board Serial Number: 1654923{n:06d}{g}"]
    if k == 1:
        return [f"NVRM: GPU {pci(g)}: persistence mode enabled"]
    if k == 2:
        return ["NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"]
    if k == 3:
        return [f"nvidia {pci(g)}: enabling device (0000 -> 0003)"]
    if k == 4:
        return [f"NVRM: GPU {pci(g)}: RmInitAdapter succeeded"]
    return [f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.54.15 (node {n})"]


def faults(n: int) -> list[str]:
    return [f"NVRM: Xid (PCI:{pci(1)[:-2]}): 13, pid=4242, name=python3, Graphics SM Warp Exception on "
            "(GPC 0, TPC 1, SM 0): Out Of Range Address",
            f"NVRM: Xid (PCI:{pci(2)[:-2]}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            f"NVRM: GPU {pci(2)}: GPU has fallen off the bus.",
            "NVRM: A GPU crash dump has been created. If possible, please run"]


def kernel_records(nodes: int, lines: int, fault_every: int) -> Iterator[KernelLine]:
    """Round by round, each node's next lines: the nodes interleave as on the topic."""
    seqs = [1000] * nodes
    for i in range(lines):
        for n in range(nodes):
            texts = background(n, i)
            if fault_every and n % fault_every == 0 and i == lines // 2:
                texts = faults(n)
            for text in texts:
                seqs[n] += 1
                at = T0 + timedelta(seconds=60 + i)
                node = f"node-{n:05d}"
                yield KernelLine(node=node, record_id=f"kmsg:b0:{seqs[n]}", source="kmsg", message=text,
                                 fault="Xid" in text or "fallen" in text, boot_id="b0", seq=seqs[n], observed_at=at,
                                 emitted_at=at, event_at=at)


class Feeder:
    def __init__(self, intake: Intake, batch: int, partitions: int) -> None:
        self.intake, self.batch, self.partitions = intake, batch, partitions
        self.offsets: dict[tuple[str, int], int] = {}
        self.pending: list[Message] = []
        self.batch_id = 0
        self.messages = 0

    def add(self, rec: NodeRecordBase) -> None:
        topic = topic_for(rec)
        part = hash(rec.node) % self.partitions
        off = self.offsets.get((topic, part), 0)
        self.offsets[(topic, part)] = off + 1
        self.pending.append(Message(topic, part, off, rec.node.encode(), encode_node_record(rec)))
        if len(self.pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.batch_id += 1
            self.intake.handle(self.batch_id, self.pending, [])
            self.messages += len(self.pending)
            self.pending = []


def memory(traced: bool) -> dict[str, int]:
    gc.collect()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    out = {"rss": rss}
    if traced:
        out["traced"] = tracemalloc.get_traced_memory()[0]
    return out


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    url = args.database_url or f"sqlite:///{work / 'bench.db'}"
    topo = topology()
    kinds = {t.name: k for t in topo.inputs if (k := topo.kinds_for(t.name))}
    store = Store(url)
    store.create_schema()
    intake = Intake(store, kinds, ParserBounds(node_idle_s=args.node_idle_s))
    feeder = Feeder(intake, args.batch, 8)
    if args.tracemalloc:
        tracemalloc.start()
    phases: dict[str, dict[str, int]] = {"start": memory(args.tracemalloc)}
    started = time.monotonic()
    for n in range(args.nodes):
        for rec in state(n):
            feeder.add(rec)
    feeder.flush()
    phases["node_state"] = memory(args.tracemalloc)
    for line in kernel_records(args.nodes, args.lines, args.fault_every):
        feeder.add(line)
    feeder.flush()
    fed_s = time.monotonic() - started
    phases["steady"] = memory(args.tracemalloc)
    parsers_steady = intake.mapper.nodes
    histories = len(store.caches.histories)
    time.sleep(args.node_idle_s)  # every node goes quiet: its open record is stored, then its parser dropped
    intake.flush_idle(args.node_idle_s)
    phases["after_expiry"] = memory(args.tracemalloc)
    per_k = 1000 / args.nodes

    def mb_per_k(phase: str, key: str) -> float | None:
        if key not in phases[phase]:
            return None
        return round((phases[phase][key] - phases["start"][key]) * per_k / 2**20, 2)

    faults_stored = len(store_reads.fault_events(store))
    store.dispose()
    return {
        "nodes": args.nodes, "gpus_per_node": GPUS, "lines_per_node": args.lines, "messages": feeder.messages,
        "fault_events": faults_stored, "fed_s": round(fed_s, 1),
        "parsers_steady": parsers_steady, "parsers_after_expiry": intake.mapper.nodes,
        "node_histories_cached": histories,
        "rss_mb": {k: round(v["rss"] / 2**20, 1) for k, v in phases.items()},
        "rss_mb_per_1000_nodes": {p: mb_per_k(p, "rss") for p in ("node_state", "steady", "after_expiry")},
        "traced_mb_per_1000_nodes": {p: mb_per_k(p, "traced") for p in ("node_state", "steady", "after_expiry")},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "target_rss_mb_per_1000_nodes": 50,
        "python": platform.python_version(),
    }


FLEET_WARMUP_S = 30.0  # fleet_bench.py's default warm-up: every node's first state, spread over 0.6 of it


def store_caches(store: Store) -> dict[str, int]:
    """How many entries each of the store process's caches holds."""
    c = store.caches
    return {"node_histories": len(c.histories), "updates_sent": len(c.updates_sent),
            "attributions_converted": len(c.fault_events._attribution_binds),
            "compiled_statements": len(store.engine._compiled_cache or {})}


def run_fleet(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The simulated fleet's records through the intake; memory after the warm-up and at the end."""
    if args.fleet_s <= FLEET_WARMUP_S:
        raise SystemExit(f"--fleet-s must be longer than the warm-up ({FLEET_WARMUP_S:.0f} s)")
    url = args.database_url or f"sqlite:///{work / 'bench.db'}"
    topo = topology()
    kinds = {t.name: k for t in topo.inputs if (k := topo.kinds_for(t.name))}
    store = Store(url)
    store.create_schema()
    intake = Intake(store, kinds, ParserBounds())
    feeder = Feeder(intake, args.batch, 12)
    fleet = Fleet(args.nodes)
    tracemalloc.start()
    phases: dict[str, dict[str, int]] = {"start": memory(True)}
    first = tracemalloc.take_snapshot()
    warm = False
    caches_warm: dict[str, int] = {}
    started, t, burst_at = time.monotonic(), 0.0, FLEET_WARMUP_S + (args.fleet_s - FLEET_WARMUP_S) * 2 / 3
    fleet.schedule_start(0.0, spread_s=0.6 * FLEET_WARMUP_S)
    while t < args.fleet_s:
        t = round(t + 0.1, 1)
        for rec in fleet.due(t):
            feeder.add(rec)
        if t >= burst_at and "burst_fault" not in phases:
            phases["burst_fault"] = {"at_s": int(t)}
            for rec in fleet.burst():
                feeder.add(rec)
        if t >= FLEET_WARMUP_S and not warm:
            feeder.flush()
            phases["warm"], warm, caches_warm = memory(True), True, store_caches(store)
    feeder.flush()
    fed_s = time.monotonic() - started
    phases["end"] = memory(True)
    top = tracemalloc.take_snapshot().compare_to(first, "lineno")[:args.top]
    tracemalloc.stop()
    per_k = 1000 / args.nodes

    def mb_per_k(key: str, since: str) -> float:
        return round((phases["end"][key] - phases[since][key]) * per_k / 2**20, 2)

    faults_stored = len(store_reads.fault_events(store))
    result = {
        "nodes": args.nodes, "simulated_s": args.fleet_s, "database": sa_backend(url), "messages": feeder.messages,
        "published": dict(fleet.counts), "fault_events": faults_stored, "fed_s": round(fed_s, 1),
        "caches_warm": caches_warm, "caches_end": store_caches(store),
        "rss_mb": {k: round(v["rss"] / 2**20, 1) for k, v in phases.items() if "rss" in v},
        "traced_mb": {k: round(v["traced"] / 2**20, 1) for k, v in phases.items() if "traced" in v},
        "mb_per_1000_nodes": {since: {"rss": mb_per_k("rss", since), "traced": mb_per_k("traced", since)}
                              for since in ("start", "warm")},
        "grew_most": [f"{'/'.join(s.traceback[0].filename.split('/')[-2:])}:{s.traceback[0].lineno} "
                      f"{s.size_diff / 2**20:+.2f} MiB {s.count_diff:+d} blocks" for s in top],
        "python": platform.python_version(),
    }
    store.dispose()
    return result


def sa_backend(url: str) -> str:
    return url.split(":", 1)[0].split("+", 1)[0]


def main() -> None:
    logging.disable(logging.WARNING)  # the incidents it opens are not the point here
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--lines", type=int, default=300, help="kernel lines per node")
    ap.add_argument("--fault-every", type=int, default=20, help="one node in this many faults (0: none)")
    ap.add_argument("--batch", type=int, default=2000, help="messages per transaction")
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--node-idle-s", type=float, default=2.0, help="the parsers' idle expiry (worker default 900)")
    ap.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false")
    ap.add_argument("--fleet-s", type=float, default=0.0, help="simulated seconds of the fleet bench's fleet (0: off)")
    ap.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL instead of SQLite")
    ap.add_argument("--top", type=int, default=15, help="allocation sites to list (--fleet-s)")
    args = ap.parse_args()
    postgres = None
    if args.postgres and not args.database_url:
        from xidpipe.localinfra.postgres import LocalPostgres

        postgres = LocalPostgres().start()
        args.database_url = postgres.url
    try:
        with tempfile.TemporaryDirectory(prefix="xidpipe-membench-") as tmp:
            print(json.dumps(run_fleet(args, Path(tmp)) if args.fleet_s else run(args, Path(tmp))))
    finally:
        if postgres is not None:
            postgres.stop()


if __name__ == "__main__":
    main()
