#!/usr/bin/env python3
"""Cordon throughput and latency against a real kube-apiserver. Prints one JSON object.

Starts its own control plane (etcd + kube-apiserver from `make testcluster`), applies
the chart's RBAC, creates --nodes nodes in one pool as admin, and drives the cordon executor as the
worker identity, recording to a JSON Lines action log in a temporary directory. The breaker's
limits are raised for the measurement (100% of the pool, 100000 per hour).

Reported:
- burst: --nodes Xid 79 requests submitted at once to --concurrency threads sharing one executor;
  cordons per second = nodes / wall time until every request is done (cordon, taint, annotations,
  condition and Event all written).
- latency, one request at a time: from `handle()` being called to the API server acknowledging
  the guarded patch that sets `spec.unschedulable` (new work stops landing there), and to the
  whole action being done (condition and Event included); p50/p99/max in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client

from models.cordon import CordonRequest
from models.cordon_policy import Breaker, CordonPolicy
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes, NodeRead
from tests.kube import apply_rbac, load_controlplane, make_configuration


class TimedNodes(KubeNodes):
    """Records when the API server acknowledged each node's cordon patch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cordoned_at: dict[str, float] = {}

    def apply_cordon(self, current: NodeRead, *args: Any) -> tuple[list[str], NodeRead]:
        done = super().apply_cordon(current, *args)
        self.cordoned_at[current.view.name] = time.perf_counter()
        return done


def request(node: str, n: int) -> CordonRequest:
    now = datetime.now(UTC)
    return CordonRequest(node=node, incident_id=f"bench-{n}-{node}", family="gpu_lost", xids=(79,),
                         category="hardware", immediate_actions=("RESTART_BM",), first_seen=now, last_seen=now,
                         gpu="GPU-bench", reason="benchmark")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 2), "p99": round(p99, 2), "max": round(ordered[-1], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()

    controlplane = load_controlplane()
    started = time.perf_counter()
    plane = controlplane.start()
    start_s = time.perf_counter() - started
    try:
        with client.ApiClient(make_configuration(plane, "admin")) as admin, \
                client.ApiClient(make_configuration(plane, "worker")) as worker, \
                tempfile.TemporaryDirectory(prefix="cordon-bench-") as tmp:
            apply_rbac(admin)
            admin_core = client.CoreV1Api(admin)
            names = [f"bench-gpu-{i:03d}" for i in range(args.nodes)]
            for name in names:
                admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
                    name=name, labels={"xidpipe.io/pool": "bench", "nvidia.com/gpu.present": "true"})))
            policy = CordonPolicy(breaker=Breaker(max_pool_share=1.0, max_per_hour=100_000))
            nodes = TimedNodes(worker, reporting_instance="cordon-bench")
            executor = CordonExecutor(policy, JsonlActionStore(Path(tmp) / "actions.jsonl"), nodes)

            # Burst: every node at once.
            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:
                results = list(pool.map(lambda item: executor.handle(request(item[1], 0)), enumerate(names)))
            burst_s = time.perf_counter() - t0
            assert all(r.outcome == "done" for r in results), [r.reason for r in results if r.outcome != "done"]
            assert all(n.spec.unschedulable for n in admin_core.list_node().items if n.metadata.name in names)

            t0 = time.perf_counter()
            for name in names:
                assert executor.release(name, by="bench", reason="benchmark").outcome == "done"
            release_s = time.perf_counter() - t0

            # Latency: one request at a time.
            to_unschedulable, to_done = [], []
            for name in names:
                t0 = time.perf_counter()
                result = executor.handle(request(name, 1))
                done = time.perf_counter()
                assert result.outcome == "done", result.reason
                to_unschedulable.append((nodes.cordoned_at[name] - t0) * 1000)
                to_done.append((done - t0) * 1000)
            version = client.VersionApi(admin).get_code().git_version
    finally:
        plane.stop()

    print(json.dumps({
        "benchmark": "cordon",
        "apiserver": version,
        "nodes": args.nodes,
        "burst": {
            "concurrency": args.concurrency,
            "seconds": round(burst_s, 3),
            "cordons_per_s": round(args.nodes / burst_s, 1),
        },
        "releases_per_s_sequential": round(args.nodes / release_s, 1),
        "latency_ms": {
            "request_to_unschedulable": percentiles(to_unschedulable),
            "request_to_done": percentiles(to_done),
            "samples": len(to_done),
        },
        "control_plane_start_s": round(start_s, 2),
        "machine": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
