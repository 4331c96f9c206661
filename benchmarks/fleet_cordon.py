"""The cordon side of benchmarks/fleet_bench.py (`--cordon`): a fault burst over 10% of a 5,000-node
fleet against the real kube-apiserver, with the breaker holding at its cap.

Starts the test control plane (etcd + kube-apiserver from `make testcluster`), applies the chart's RBAC,
creates --nodes Node objects in one pool (plain API objects, created in bulk by admin: no kubelet
runs), and drives the responder's cordon executor (`respond.cordon.executor.CordonExecutor`) with
the real Kubernetes adapter (`respond.cordon.kube_nodes.KubeNodes`) as the worker's RBAC identity,
not in dry run, with the policy's breaker at --max-pool-share of the pool and --max-per-hour (defaults
5% and 10,000 per hour, so that the pool share is the cap that binds in the burst: 250 of 5,000).

The burst: an Xid 79 (GPU fallen off the bus: cordon at once) on one GPU of each of the first
--burst-share of the nodes (10%: 500 of 5,000), all at the same instant, taken as the responder's
cordon lane takes one fetch of requests (`respond.cordon_lane.CordonLane.offer_many`): every request
decided in order (node read, decision, guarded patch, record), then every plan completed (the
condition and the Event), here on --concurrency threads. Reported: the outcomes, the nodes
the API server holds unschedulable afterwards (must equal the cap), whether the breaker tripped, and
the time to cordon from the Xid's event time to the API server acknowledging the patch that set
`spec.unschedulable`, p50/p99 over the cordoned nodes, plus each cordon's own service time (from its
request being picked up to that patch), how long each request held the action record's lock, and the
load average before and after. The pool's counts come from the adapter's node cache (list+watch);
`--list-pool` lists the pool per decision instead (how it was done before the cache).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from benchmarks.fleet_measure import percentiles
from models.cordon import CordonRequest, pool_allowance
from models.cordon_policy import Breaker, CordonPolicy
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor, Decided
from respond.cordon.kube_nodes import KubeNodes, NodeRead
from tests.kube import apply_rbac, load_controlplane, make_configuration


class TimedNodes(KubeNodes):
    """Records when the API server acknowledged each node's cordon patch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cordoned_at: dict[str, float] = {}

    def apply_cordon(self, current: NodeRead, *args: Any) -> tuple[list[str], NodeRead]:
        done = super().apply_cordon(current, *args)
        self.cordoned_at.setdefault(current.view.name, time.monotonic())
        return done


class TimedStore(JsonlActionStore):
    """Records how long each request held the action record's lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held_ms: list[float] = []

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with super().exclusive():
            start = time.monotonic()
            try:
                yield
            finally:
                self.held_ms.append((time.monotonic() - start) * 1000)


def create_nodes(admin: client.ApiClient, pool: str, count: int, concurrency: int = 16) -> tuple[list[str], float]:
    """Create `count` GPU nodes in `pool`; returns their names and the seconds it took."""
    core = client.CoreV1Api(admin)
    names = [f"{pool}-gpu-{i:05d}" for i in range(count)]

    def create(name: str) -> None:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels={
            "xidpipe.io/pool": pool, "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"})),
            _request_timeout=60)

    start = time.monotonic()
    with ThreadPoolExecutor(concurrency) as threads:
        list(threads.map(create, names))
    return names, time.monotonic() - start


def xid79(node: str, at: datetime) -> CordonRequest:
    """The cordon candidate the stream offers for a GPU that fell off the bus on `node` at `at`."""
    return CordonRequest(node=node, incident_id=f"fleet-bench-{node}-gpu3", family="gpu_lost", xids=(79,),
                         category="hardware", immediate_actions=("RESTART_BM",), first_seen=at, last_seen=at,
                         occurrences=(at,), gpu="GPU-fleet-bench-3", reason="Xid 79: GPU has fallen off the bus")


def unschedulable(admin: client.ApiClient, pool: str) -> int:
    response = client.CoreV1Api(admin).list_node(label_selector=f"xidpipe.io/pool={pool}", _preload_content=False)
    items = json.loads(response.data).get("items") or []
    return sum(1 for n in items if (n.get("spec") or {}).get("unschedulable"))


def burst(executor: CordonExecutor, nodes: TimedNodes, names: list[str], concurrency: int) -> dict[str, Any]:
    """The burst as the responder's cordon lane takes one fetch of requests (`CordonLane.offer_many`):
    every request decided in order (the node read, the decision, the guarded patch and the record),
    then every plan completed (condition, Event), here on `concurrency` threads."""
    at_wall, at = datetime.now(UTC), time.monotonic()
    picked: dict[str, float] = {}

    def decide(name: str) -> Decided:
        picked[name] = time.monotonic()
        return executor.decide(xid79(name, at_wall))

    decided = [decide(name) for name in names]
    decided_s = time.monotonic() - at
    with ThreadPoolExecutor(concurrency) as pool:
        outcomes = Counter(r.outcome for r in pool.map(executor.complete, decided))
    took = time.monotonic() - at
    done = [n for n in names if n in nodes.cordoned_at]
    return {
        "requests": len(names), "seconds": round(took, 2), "decided_s": round(decided_s, 2),
        "outcomes": dict(outcomes),
        "xid_to_unschedulable_ms": percentiles([(nodes.cordoned_at[n] - at) * 1000 for n in done]),
        "service_ms": percentiles([(nodes.cordoned_at[n] - picked[n]) * 1000 for n in done]),
    }


def cordon_mode(args: argparse.Namespace, plane: Any = None) -> dict[str, Any]:
    """The burst on `plane` (a running control plane of deploy/testcluster), else on one started here."""
    policy = CordonPolicy(breaker=Breaker(max_pool_share=args.max_pool_share, max_per_hour=args.max_per_hour))
    started = time.monotonic()
    own = plane is None
    if own:
        plane = load_controlplane().start()
    start_s = time.monotonic() - started
    pool = f"fleet-{uuid.uuid4().hex[:6]}"
    try:
        with client.ApiClient(make_configuration(plane, "admin")) as admin, \
                client.ApiClient(make_configuration(plane, "worker")) as worker, \
                tempfile.TemporaryDirectory(prefix="fleet-cordon-") as tmp:
            apply_rbac(admin)
            names, create_s = create_nodes(admin, pool, args.nodes)
            nodes = TimedNodes(worker, reporting_instance="fleet-bench",
                               watch_nodes=not getattr(args, "list_pool", False))
            if not getattr(args, "list_pool", False):  # a running responder lists and watches from its start
                nodes.start_watch(policy.scope.pool_label, timeout=60)
            store = TimedStore(Path(tmp) / "actions.jsonl")
            executor = CordonExecutor(policy, store, nodes)
            hit = names[: max(1, round(args.nodes * args.burst_share))]
            load_before = os.getloadavg()[0]
            result = burst(executor, nodes, hit, args.concurrency)
            load_after = os.getloadavg()[0]
            relists = nodes.cache.relists if nodes.cache is not None else None
            nodes.close()
            held = unschedulable(admin, pool)
            version = client.VersionApi(admin).get_code().git_version
            breaker = store.breaker()
    finally:
        if own:
            plane.stop()
    cap = min(pool_allowance(policy, args.nodes), args.max_per_hour)
    return {
        "benchmark": "fleet-cordon", "apiserver": version, "nodes": args.nodes, "burst_share": args.burst_share,
        "pool": pool,
        "breaker": {"max_pool_share": args.max_pool_share, "max_per_hour": args.max_per_hour, "cap": cap,
                    "tripped": breaker.tripped, "reason": breaker.reason},
        "burst": {**result, "concurrency": args.concurrency, "lock_held_ms": percentiles(store.held_ms)},
        "pool_counts": "list per decision" if relists is None else f"node cache (list+watch, {relists} list)",
        "load_1m": {"before": round(load_before, 2), "after": round(load_after, 2)},
        "unschedulable_nodes": held, "held_at_cap": held == cap,
        "nodes_created_s": round(create_s, 1), "control_plane_start_s": round(start_s, 1) if own else None,
    }
