#!/usr/bin/env python3
"""Xid line to cordoned node, through the whole pipeline, on a real kube-apiserver. Prints JSON.

Starts a local Kafka, the test control plane (etcd + kube-apiserver from `make testcluster`) with
the chart's RBAC applied and --nodes GPU nodes, a stream worker (subprocess, SQLite), and the
responder in this process with the cordon executor acting as the worker's RBAC identity (breaker
raised for the measurement). Then, one node at a time, it produces an Xid 79 kernel record as the
node agent publishes it and measures until the API server acknowledged the patch that made the
node unschedulable: agent record → Kafka → worker (parse, correlate, classify, incident, SQL,
outbox) → actions topic → responder → guarded cordon. Target p99 <= 1 s on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka import KafkaProducer
from kubernetes import client

from models.cordon_policy import Breaker, CordonPolicy
from models.node_records import KernelLine, encode_node_record
from models.topics import topology
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes, NodeRead
from respond.responder import Responder, build_responder, run_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from streams.runner import WorkerProcess
from streams.settings import WorkerSettings
from streams.worker import prepare
from tests.kube import apply_rbac, load_controlplane, make_configuration
from xidpipe.localinfra.kafka import LocalKafka, fetch


class TimedNodes(KubeNodes):
    """Records when the API server acknowledged each node's cordon patch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cordoned_at: dict[str, float] = {}

    def apply_cordon(self, current: NodeRead, *args: Any) -> tuple[list[str], NodeRead]:
        done = super().apply_cordon(current, *args)
        self.cordoned_at.setdefault(current.view.name, time.perf_counter())
        return done


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50": round(statistics.median(ordered), 1), "p99": round(p99, 1), "max": round(ordered[-1], 1)}


def xid_line(node: str, n: int) -> KernelLine:
    message = (f"[{1000 + n}.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
               "GPU has fallen off the bus.")
    return KernelLine(node=node, record_id=f"kmsg:bench:{n}", source="kmsg", message=message, fault=True,
                      boot_id="bench", seq=n, observed_at=datetime.now(UTC))


def _create_nodes(admin: client.ApiClient, count: int) -> list[str]:
    """Apply the chart's RBAC and create `count` GPU nodes in one pool; returns their names."""
    apply_rbac(admin)
    names = [f"pipe-gpu-{i:03d}" for i in range(count)]
    core = client.CoreV1Api(admin)
    for name in names:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
            name=name, labels={"xidpipe.io/pool": "bench", "nvidia.com/gpu.present": "true"})))
    return names


def _run_responder(respond: RespondSettings, responder: Responder, stop: threading.Event) -> None:
    """The responder on an event loop of this thread, until `stop` is set: it shuts down in order (within
    its grace) before the loop closes, and the caller joins this thread before Kafka and the API server
    go away."""
    async def go() -> None:
        ev = asyncio.Event()
        task = asyncio.create_task(run_responder(respond, responder, ev))
        while not stop.is_set() and not task.done():
            await asyncio.sleep(0.05)
        ev.set()
        await task
    asyncio.run(go())


def _cordon_latencies(bootstrap: str, kernel_topic: str, names: list[str], nodes: TimedNodes,
                      worker: WorkerProcess, timeout: float) -> list[float]:
    """One Xid line per node after a warm-up node; ms from the send to the node's cordon."""
    latencies: list[float] = []
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    # Warm-up: the worker's first rebalance and the responder's first fetch.
    warm = names[0]
    producer.send(kernel_topic, key=warm.encode(), value=encode_node_record(xid_line(warm, 0))).get(30)
    deadline = time.monotonic() + 90
    while warm not in nodes.cordoned_at and time.monotonic() < deadline:
        time.sleep(0.05)
    assert warm in nodes.cordoned_at, "warm-up cordon never happened:\n" + worker.log_tail()
    for n, name in enumerate(names[1:], 1):
        t0 = time.perf_counter()
        producer.send(kernel_topic, key=name.encode(), value=encode_node_record(xid_line(name, n)))
        producer.flush()
        deadline = time.monotonic() + timeout
        while name not in nodes.cordoned_at and time.monotonic() < deadline:
            time.sleep(0.002)
        assert name in nodes.cordoned_at, f"{name} not cordoned in {timeout} s"
        latencies.append((nodes.cordoned_at[name] - t0) * 1000)
    producer.close()
    return latencies


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=30, help="nodes, one measured cordon each")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for one cordon")
    args = ap.parse_args()
    fetch()
    controlplane = load_controlplane()
    run = uuid.uuid4().hex[:6]
    latencies: list[float] = []
    with tempfile.TemporaryDirectory(prefix="cordon-pipeline-") as tmp, LocalKafka(num_partitions=2) as kafka:
        plane = controlplane.start()
        worker: WorkerProcess | None = None
        responding: threading.Thread | None = None
        stop = threading.Event()
        try:
            with client.ApiClient(make_configuration(plane, "admin")) as admin, \
                    client.ApiClient(make_configuration(plane, "worker")) as as_worker:
                names = _create_nodes(admin, args.nodes)
                core = client.CoreV1Api(admin)
                db = f"sqlite:///{tmp}/xidpipe.db"
                settings = WorkerSettings(
                    bootstrap_servers=kafka.bootstrap, database_url=db, app_id=f"bench-{run}", partitions=2,
                    topic_prefix=f"bench-{run}.", datadir=Path(tmp) / "faust", session_timeout_s=6.0,
                    heartbeat_interval_s=1.0, commit_interval_s=0.5)
                prepare(settings)
                worker = WorkerProcess(settings, Path(tmp) / "worker.log").start()
                nodes = TimedNodes(as_worker, reporting_instance="cordon-pipeline-bench")
                executor = CordonExecutor(CordonPolicy(breaker=Breaker(max_pool_share=1.0, max_per_hour=100_000)),
                                          JsonlActionStore(Path(tmp) / "actions.jsonl"), nodes)
                sinks = build_sinks(SinkSettings(outbox_dir=Path(tmp) / "outbox", group_wait_s=0), db)
                respond = RespondSettings(bootstrap_servers=kafka.bootstrap, topic_prefix=settings.topic_prefix,
                                          database_url=db, group_id=f"bench-responder-{run}")
                responder = build_responder(respond, executor, sinks)

                responding = threading.Thread(target=_run_responder, args=(respond, responder, stop),
                                              name="responder")
                responding.start()
                kernel_topic = topology(settings.topic_prefix, settings.partitions).kernel.name
                latencies = _cordon_latencies(kafka.bootstrap, kernel_topic, names, nodes, worker, args.timeout)
                unschedulable = sum(1 for n in core.list_node().items if n.spec.unschedulable)
                version = client.VersionApi(admin).get_code().git_version
        finally:
            stop.set()
            if responding is not None:
                responding.join(respond.shutdown_grace_s + 30)
                if responding.is_alive():
                    print("the responder did not stop", file=sys.stderr)
            if worker is not None:
                worker.terminate()
            plane.stop()
    print(json.dumps({
        "benchmark": "cordon_pipeline",
        "apiserver": version,
        "kafka": "4.0.2 (local)",
        "samples": len(latencies),
        "nodes_unschedulable": unschedulable,
        "xid_line_to_unschedulable_ms": percentiles(latencies),
        "target_p99_ms": 1000,
        "meets_target": percentiles(latencies)["p99"] <= 1000,
        "machine": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
