#!/usr/bin/env python3
"""A simulated fleet against the stream worker (1 and 3 processes) on PostgreSQL, and the cordon side
against a real kube-apiserver (`--cordon`). Prints one JSON object.

Fleet mode (default): starts a local Kafka (unless --bootstrap) and a throwaway PostgreSQL with commit
timestamps on (unless --database-url, a server URL on which the bench may CREATE DATABASE), then for
each worker count in --workers (default 1,3): a fresh database, fresh topics with --partitions
partitions (default 12), that many `python -m streams.worker` processes in one consumer group
(`verify_node_identity` off: the simulated agents send no token), and the fleet of
`benchmarks/fleet_sim.py` (--nodes × 8 GPUs) publishing through the agent's producer settings:

- warm-up (--warmup-s): every node's agent starts (inventory, pod assignments, processes, spread over
  the first 60% of it) and kernel lines flow;
- measured window (--measure-s): kernel lines at --kernel-rate per node per second (--fault-share of
  them Xids), snapshots on their schedule, and in the middle the burst: Xid 43 on every GPU of
  --burst-share of the nodes within a second (one job's teardown);
- drain: production stops; the time until the group has committed everything.

Reported per worker count: offered and consumed node records per second in the window (consumed =
the group's committed offsets; "sustained" when the lag at the end of the window is under two
seconds of offered load), consumer lag (max, end of window), Xid → incident latency (from the
kernel's event time, which the simulated agent takes right before producing, to the commit of the
transaction that wrote the fault event and its incident: PostgreSQL's commit timestamp) p50/p99 for
steady faults and the burst, worker RSS (each worker and its store process, summed) per 1,000 nodes,
total and above the idle workers' baseline (the peak of the samples taken each second; `rss_hwm_*`: the
sum of the processes' own peaks, VmHWM, which no sample misses), and the database's growth per million
fault events; `targets` (each figure against the issue's target for this command line) and
`regressions` (each figure more than 20% worse than the one last recorded for it:
`benchmarks/fleet_targets.py`, `--record`). With --slope-nodes M, the first worker count runs again at
M nodes (a fresh database and topics, the same rates per node) and `memory_slope` gives the peak RSS
per 1,000 nodes more: what the worker grows by with the fleet, without its fixed cost (the processes
before the first node).

Rates: NVSentinel's scale test reports 10,143 events/s from 60 node connectors at 50,000 nodes,
0.20 events/s per node. The default here is 0.5 kernel lines per node per second (2.5× that, and
1,000/s at 2,000 nodes), plus the snapshots (an inventory per node every 300 s, a job change per
node every 600 s on average).

Cordon mode (`--cordon`): `benchmarks/fleet_cordon.py`.

    .venv/bin/python benchmarks/fleet_bench.py                      # 2,000 nodes, 1 and 3 workers
    .venv/bin/python benchmarks/fleet_bench.py --nodes 10000
    .venv/bin/python benchmarks/fleet_bench.py --cordon             # 5,000 nodes, burst over 10%
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import fleet_targets
from benchmarks.fleet_measure import (
    BenchPostgres,
    GroupOffsets,
    database_figures,
    hwm_by_process,
    incident_summary,
    latencies,
    new_database,
    tree_rss_bytes,
)
from benchmarks.fleet_sim import BURST_PROCESS, Fleet, FleetProducer, FleetRates
from models.topics import topology
from streams.runner import WorkerProcess
from streams.settings import WorkerSettings
from streams.worker import prepare

TICK_S = 0.1
# The tables that grow with fault events (the rest grow with nodes and their snapshots).
FAULT_TABLES = ("fault_events", "incidents", "incident_codes", "incident_namespaces", "incident_transitions",
                "outbox")
NVSENTINEL = {"events_per_s": 10_143, "nodes": 50_000, "connectors": 60}


class Run:
    """One measured run: N workers in one group on fresh topics and a fresh database."""

    def __init__(self, args: argparse.Namespace, bootstrap: str, server_url: str, workers: int, work: Path) -> None:
        self.args, self.bootstrap, self.workers, self.work = args, bootstrap, workers, work
        run = uuid.uuid4().hex[:8]
        self.db_url = new_database(server_url, f"fleet_{workers}w_{run}")
        self.settings = WorkerSettings(
            bootstrap_servers=bootstrap, database_url=self.db_url, app_id=f"fleet-{run}",
            topic_prefix=f"fleet-{run}.", partitions=args.partitions, datadir=work / f"faust-{run}",
            session_timeout_s=10.0, heartbeat_interval_s=1.0, commit_interval_s=1.0,
            log_level=os.environ.get("BENCH_LOG_LEVEL", "warn"))
        self.procs: list[WorkerProcess] = []
        self.offsets: GroupOffsets | None = None
        self.lag: list[tuple[float, int]] = []
        self.rss_peak = 0

    def start_workers(self) -> dict[str, Any]:
        prepare(self.settings)
        topo = topology(self.settings.topic_prefix, self.settings.partitions)
        self.offsets = GroupOffsets(self.bootstrap, self.settings.app_id, [t.name for t in topo.inputs])
        empty = database_figures(self.db_url)
        for i in range(self.workers):
            st = self.settings.model_copy(update={"datadir": self.work / f"{self.settings.app_id}-{i}"})
            self.procs.append(WorkerProcess(st, self.work / f"{self.settings.app_id}-{i}.log").start())
        joined = wait_members(self.offsets, self.workers, self.procs, timeout=180)
        time.sleep(2.0)  # let the workers settle after the rebalance before taking the idle baseline
        return {"database_bytes_empty": empty["database_bytes"], "tables_empty": empty["tables_bytes"],
                "group_joined_s": round(joined, 1),
                "rss_idle_bytes": tree_rss_bytes(p.pid for p in self.procs)}

    def check_alive(self) -> None:
        for p in self.procs:
            if not p.alive():
                raise RuntimeError(f"worker {p.pid} exited:\n{p.log_tail()}")

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        if self.offsets is not None:
            self.offsets.close()


def wait_members(offsets: GroupOffsets, count: int, procs: list[WorkerProcess], timeout: float) -> float:
    """Seconds until the group is stable with `count` members."""
    from kafka.errors import KafkaError

    start = time.monotonic()
    state: tuple[str, int] = ("", 0)
    while time.monotonic() - start < timeout:
        for p in procs:
            if not p.alive():
                raise RuntimeError(f"worker exited before joining:\n{p.log_tail()}")
        with contextlib.suppress(KafkaError):  # the coordinator does not know the group yet
            state = offsets.members()
        if state == ("Stable", count):
            return time.monotonic() - start
        time.sleep(0.5)
    raise TimeoutError(f"group {offsets.group} not stable with {count} members after {timeout:.0f} s: {state}")


def simulate(run: Run, fleet: Fleet, producer: FleetProducer, offsets: GroupOffsets) -> dict[str, Any]:
    """Warm-up, measured window with the burst in its middle; returns the window's figures."""
    args = run.args
    t0 = time.monotonic()
    fleet.schedule_start(t0, spread_s=0.6 * args.warmup_s)
    window_at, end_at = t0 + args.warmup_s, t0 + args.warmup_s + args.measure_s
    burst_at = window_at + args.measure_s / 2 if args.burst_share > 0 else float("inf")
    # --window-after-drain: the window opens once the start's backlog is drained (the lag under two
    # seconds of the kernel lines' rate), at most --drain-wait-s after the warm-up.
    drained_lag = 2 * args.nodes * args.kernel_rate
    waited_until = window_at + (args.drain_wait_s if getattr(args, "window_after_drain", False) else 0.0)
    marks: dict[str, Any] = {}
    next_sample = t0
    while True:
        now = time.monotonic()
        if now >= end_at:
            break
        for record in fleet.due(now):
            producer.send(record)
        if "start" not in marks and now >= window_at:
            if now < waited_until and (not run.lag or run.lag[-1][1] > drained_lag):
                end_at = now + args.measure_s + 1.0  # not yet: the window (and its end) moves on
                time.sleep(max(0.0, TICK_S - (time.monotonic() - now)))
                if now >= next_sample:
                    next_sample = now + 1.0
                    end, done = offsets.sample()
                    run.lag.append((now - t0, end - done))
                    run.check_alive()
                continue
            producer.flush()
            window_at = time.monotonic()
            end_at, marks["waited_s"] = window_at + args.measure_s, round(window_at - t0 - args.warmup_s, 1)
            burst_at = window_at + args.measure_s / 2 if args.burst_share > 0 else float("inf")
            marks["start"] = (time.monotonic(), datetime.now(UTC), producer.sent, offsets.sample())
        if now >= burst_at and "burst" not in marks:
            marks["burst"] = datetime.now(UTC)
            for record in fleet.burst():
                producer.send(record)
        if now >= next_sample:
            next_sample = now + 1.0
            end, done = offsets.sample()
            run.lag.append((now - t0, end - done))
            run.rss_peak = max(run.rss_peak, tree_rss_bytes(p.pid for p in run.procs))
            run.check_alive()
        time.sleep(max(0.0, TICK_S - (time.monotonic() - now)))
    producer.flush()
    m_start, wall_start, sent_start, (_, done_start) = marks["start"]
    m_end, wall_end = time.monotonic(), datetime.now(UTC)
    end_total, done_end = offsets.sample()
    seconds = m_end - m_start
    window_lag = [lag for at, lag in run.lag if at >= window_at - t0]
    offered = (producer.sent - sent_start) / seconds
    return {
        "window_s": round(seconds, 1), "since": wall_start, "until": wall_end,
        "window_waited_s": marks.get("waited_s", 0.0),
        "offered_records_per_s": round(offered, 1),
        "consumed_records_per_s": round((done_end - done_start) / seconds, 1),
        "lag_max": max(window_lag, default=0), "lag_end_of_window": end_total - done_end,
        "sustained": end_total - done_end <= 2 * offered,
    }


def drain(run: Run, offsets: GroupOffsets, timeout: float) -> float | None:
    """Seconds until the group committed every record, or None past `timeout`."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        end, done = offsets.sample()
        if end - done == 0:
            return round(time.monotonic() - start, 1)
        run.check_alive()
        time.sleep(0.5)
    return None


def run_fleet(args: argparse.Namespace, bootstrap: str, server_url: str, workers: int, work: Path) -> dict[str, Any]:
    run = Run(args, bootstrap, server_url, workers, work)
    rates = FleetRates(kernel_per_node_s=args.kernel_rate, fault_share=args.fault_share)
    fleet = Fleet(args.nodes, rates, burst_share=args.burst_share, seed=args.seed)
    try:
        idle = run.start_workers()
        assert run.offsets is not None
        producer = FleetProducer(bootstrap, run.settings.topic_prefix)
        try:
            window = simulate(run, fleet, producer, run.offsets)
            rss_end = tree_rss_bytes(p.pid for p in run.procs)
            drained = drain(run, run.offsets, args.drain_timeout_s)
        finally:
            producer.close()
        rss_after_drain = tree_rss_bytes(p.pid for p in run.procs)
        rss_hwm = tree_rss_bytes((p.pid for p in run.procs), "VmHWM")
        hwm_split = hwm_by_process(p.pid for p in run.procs)
    finally:
        run.stop()
    lat = latencies(run.db_url, window.pop("since"), window.pop("until"), BURST_PROCESS)
    db = database_figures(run.db_url)
    faults = db["rows"]["fault_events"]
    grown = {t: b - idle["tables_empty"].get(t, 0) for t, b in db.pop("tables_bytes").items()}
    fault_side = sum(grown.get(t, 0) for t in FAULT_TABLES)
    per_k = args.nodes / 1000
    rss_peak = max(run.rss_peak, rss_end, rss_after_drain)
    return {
        "workers": workers, **window, "drain_s": drained,
        "published": dict(fleet.counts), "producer_failed": producer.failed,
        "xid_to_incident_commit_ms": lat,
        "memory": {
            "rss_idle_bytes": idle["rss_idle_bytes"], "rss_end_bytes": rss_end, "rss_peak_bytes": rss_peak,
            "rss_mb_per_1000_nodes": round(rss_peak / 2**20 / per_k, 1),
            "rss_above_idle_mb_per_1000_nodes": round((rss_peak - idle["rss_idle_bytes"]) / 2**20 / per_k, 1),
            "rss_hwm_bytes": rss_hwm, "rss_hwm_by_process": hwm_split,
            "rss_hwm_above_idle_mb_per_1000_nodes": round((rss_hwm - idle["rss_idle_bytes"]) / 2**20 / per_k, 1),
        },
        "database": {
            **db, "growth_bytes": db["database_bytes"] - idle["database_bytes_empty"],
            "growth_by_table_bytes": dict(sorted(grown.items(), key=lambda kv: -kv[1])[:10]),
            "bytes_per_million_fault_events": round((db["database_bytes"] - idle["database_bytes_empty"])
                                                    / faults * 1e6) if faults else None,
            "fault_tables_bytes_per_million_fault_events": round(fault_side / faults * 1e6) if faults else None,
            "fault_tables": list(FAULT_TABLES),
        },
        "incidents": incident_summary(run.db_url), "group_joined_s": idle["group_joined_s"],
    }


def fleet_mode(args: argparse.Namespace) -> dict[str, Any]:
    from xidpipe.localinfra.kafka import LocalKafka

    work = Path(tempfile.mkdtemp(prefix="xidpipe-fleet-bench-"))
    broker = postgres = None
    per_node = NVSENTINEL["events_per_s"] / NVSENTINEL["nodes"]
    result: dict[str, Any] = {
        "benchmark": "fleet", "nodes": args.nodes, "gpus": args.nodes * 8, "partitions": args.partitions,
        "rates_per_node": {"kernel_lines_per_s": args.kernel_rate, "fault_share": args.fault_share,
                           "faults_per_s": round(args.kernel_rate * args.fault_share, 4),
                           "inventory_interval_s": FleetRates.inventory_interval_s,
                           "job_change_s": FleetRates.job_change_s,
                           "health_heartbeat_s": FleetRates.health_heartbeat_s,
                           "workloads_heartbeat_s": FleetRates.workloads_heartbeat_s},
        "nvsentinel_events_per_node_s": round(per_node, 3), "burst_share": args.burst_share,
        "latency_from": "kernel event time (taken right before producing) to the PostgreSQL commit of the "
                        "fault event and its incident",
        "verify_node_identity": False,
    }
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            broker = LocalKafka(num_partitions=args.partitions).start()
            bootstrap = broker.bootstrap
        server_url = args.database_url
        if not server_url:
            postgres = BenchPostgres().start()
            server_url = postgres.url
        result["runs"] = []
        for n in args.workers.split(","):
            try:
                result["runs"].append(run_fleet(args, bootstrap, server_url, int(n), work))
            except (RuntimeError, TimeoutError) as exc:  # a run that fails leaves the others' figures
                result["runs"].append({"workers": int(n), "error": str(exc)[-2000:]})
        if args.slope_nodes:
            result["memory_slope"] = memory_slope(args, bootstrap, server_url, work, result["runs"][0])
    finally:
        if broker is not None:
            broker.stop()
        if postgres is not None:
            postgres.stop()
        shutil.rmtree(work, ignore_errors=True)
    return result


def memory_slope(args: argparse.Namespace, bootstrap: str, server_url: str, work: Path,
                 run: dict[str, Any]) -> dict[str, Any]:
    """The first worker count run again at --slope-nodes nodes: the peak RSS per 1,000 nodes more, which
    leaves out what does not grow with the fleet (the processes' fixed cost, allocator arenas, caches
    filled at any size)."""
    if "memory" not in run:
        return {"error": "the run at --nodes has no figures"}
    small = run_fleet(argparse.Namespace(**{**vars(args), "nodes": args.slope_nodes}), bootstrap, server_url,
                      int(run["workers"]), work)
    if "memory" not in small:
        return {"error": small.get("error", "no figures")}
    peaks = {args.slope_nodes: small["memory"]["rss_peak_bytes"], args.nodes: run["memory"]["rss_peak_bytes"]}
    more_k = (args.nodes - args.slope_nodes) / 1000
    return {"workers": run["workers"], "nodes": sorted(peaks), "rss_peak_bytes": [peaks[n] for n in sorted(peaks)],
            "rss_mb_per_1000_more_nodes": round((peaks[args.nodes] - peaks[args.slope_nodes]) / 2**20 / more_k, 1),
            "at_slope_nodes": {k: small[k] for k in ("consumed_records_per_s", "lag_max", "memory")}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=None, help="default 2,000 (fleet), 5,000 (--cordon)")
    ap.add_argument("--workers", default="1,3", help="worker counts to run, comma-separated")
    ap.add_argument("--partitions", type=int, default=12)
    ap.add_argument("--kernel-rate", type=float, default=0.5, help="kernel lines per node per second")
    ap.add_argument("--fault-share", type=float, default=0.05, help="share of the kernel lines that are Xids")
    ap.add_argument("--burst-share", type=float, default=0.10, help="share of the nodes in the burst")
    ap.add_argument("--warmup-s", type=float, default=30.0)
    ap.add_argument("--measure-s", type=float, default=60.0)
    ap.add_argument("--drain-timeout-s", type=float, default=300.0)
    ap.add_argument("--window-after-drain", action="store_true",
                    help="open the measured window once the start's backlog is drained (the lag under two seconds "
                         "of kernel lines), at most --drain-wait-s after the warm-up (window_waited_s says how long)")
    ap.add_argument("--drain-wait-s", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--slope-nodes", type=int, default=0,
                    help="also run the first worker count at this many nodes (fewer than --nodes) and print "
                         "the peak RSS per 1,000 nodes more (memory_slope)")
    ap.add_argument("--bootstrap", help="use this broker instead of starting one")
    ap.add_argument("--database-url", help="a PostgreSQL server URL (track_commit_timestamp on) instead of a "
                                           "throwaway cluster; the bench creates a database per run")
    ap.add_argument("--cordon", action="store_true", help="the cordon side (benchmarks/fleet_cordon.py)")
    ap.add_argument("--max-pool-share", type=float, default=0.05, help="--cordon: the breaker's pool share")
    ap.add_argument("--max-per-hour", type=int, default=10_000, help="--cordon: the breaker's hourly cap")
    ap.add_argument("--concurrency", type=int, default=8, help="--cordon: plans completed at once, after the decisions")
    ap.add_argument("--list-pool", action="store_true", help="--cordon: list the pool per decision (no node cache)")
    ap.add_argument("--record", action="store_true", help="write this run's figures as its configuration's recorded "
                                                          "ones (benchmarks/fleet_recorded.json)")
    args = ap.parse_args()
    started = time.monotonic()
    if args.cordon:
        from benchmarks.fleet_cordon import cordon_mode

        args.nodes = args.nodes or 5000
        result = cordon_mode(args)
    else:
        args.nodes = args.nodes or 2000
        if args.slope_nodes and not 0 < args.slope_nodes < args.nodes:
            ap.error(f"--slope-nodes must be between 0 and --nodes ({args.nodes})")
        result = fleet_mode(args)
    result["machine"] = {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                         "python": platform.python_version()}
    result["bench_s"] = round(time.monotonic() - started, 1)
    configs = list(fleet_targets.cordon_figures(result) if args.cordon else fleet_targets.fleet_figures(result))
    result.update(fleet_targets.judge(configs))
    if args.record:
        fleet_targets.record(configs, result["machine"]["load_1m"])
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
