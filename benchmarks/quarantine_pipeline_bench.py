#!/usr/bin/env python3
"""Xid line to DeviceTaintRule created, through the whole pipeline, on a real kube-apiserver. Prints JSON.

The same method as `cordon_pipeline_bench.py`: a local Kafka, the test control plane (etcd +
kube-apiserver from `make testcluster`; DeviceTaintRules and ResourceSlices are served by the API
server alone) with the chart's RBAC applied and --nodes GPU nodes, each with a ResourceSlice of 8
GPUs shaped like NVIDIA's DRA driver's, a stream worker (subprocess, SQLite) that has stored each
node's GPU inventory (so an Xid line's PCI address names the GPU's UUID), and the responder in this
process with the executor acting as the worker's RBAC identity under a policy whose first rule
quarantines the GPU of an Xid 48 (breaker raised for the measurement). Then, one node at a time, it
produces an Xid 48 kernel record as the node agent publishes it and measures until the API server
acknowledged the create of the GPU's DeviceTaintRule: agent record → Kafka → worker (parse,
correlate, classify, incident, SQL, outbox) → actions topic → responder → the GPU's device from the
slice cache → the rule. Target p99 <= 1 s on 2 cores, as the cordon's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sqlalchemy as sa
from kafka import KafkaProducer
from kubernetes import client

from benchmarks.cordon_pipeline_bench import _run_responder, percentiles
from history.engine import make_engine
from models.cordon import CordonDecision, CordonRequest
from models.cordon_policy import Breaker, CordonPolicy, Match, Rule
from models.node_records import GpuInfo, GpuInventory, encode_node_record
from models.quarantine import RuleView
from models.topics import record_key, topology
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.quarantine.kube_cluster import KubeCluster
from respond.responder import build_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from streams.runner import WorkerProcess
from streams.settings import WorkerSettings
from streams.worker import prepare
from tests.cluster import publish_gpu_slice
from tests.kube import apply_rbac, load_controlplane, make_configuration
from tests.streams.records import Kmsg, pci
from xidpipe.localinfra.kafka import LocalKafka, fetch

GPUS = 8
FAULTY = 3  # the GPU index of each node's Xid 48


def gpu_uuid(node: str, i: int) -> str:
    """A GPU's UUID, unique per node and index."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, node).hex[:8]}-0000-4000-8000-{i:012d}"


def inventory(node: str, at: datetime) -> GpuInventory:
    """The node's GPU inventory as the agent publishes it: each GPU's UUID at the PCI address its Xid
    lines name (`tests.streams.records.pci`), the same UUIDs as its ResourceSlice."""
    gpus = tuple(GpuInfo(index=i, uuid=gpu_uuid(node, i), pci_bus_id=f"0000{pci(i).upper()}", serial=f"bench{i}",
                         name="NVIDIA H100 80GB HBM3") for i in range(GPUS))
    return GpuInventory(node=node, record_id=f"inventory:{node}:{at.isoformat()}", emitted_at=at, gpus=gpus)


class TimedCluster(KubeCluster):
    """Records when the API server acknowledged each node's rule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.quarantined_at: dict[str, float] = {}

    def apply_quarantine(self, req: CordonRequest, decision: CordonDecision,
                         at: datetime) -> tuple[list[str], RuleView]:
        done = super().apply_quarantine(req, decision, at)
        self.quarantined_at.setdefault(req.node, time.perf_counter())
        return done


def _create_nodes(admin: client.ApiClient, count: int) -> list[str]:
    """The chart's RBAC, `count` GPU nodes in one pool, each with its 8-GPU ResourceSlice."""
    apply_rbac(admin)
    names = [f"quar-gpu-{i:03d}" for i in range(count)]
    core = client.CoreV1Api(admin)
    for name in names:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
            name=name, labels={"xidpipe.io/pool": "bench", "nvidia.com/gpu.present": "true"})))
        publish_gpu_slice(admin, name, uuids=[gpu_uuid(name, i) for i in range(GPUS)])
    return names


def _inventories(bootstrap: str, state_topic: str, names: list[str], db: str, worker: WorkerProcess) -> None:
    """Each node's GPU inventory, published as the agent does and stored by the worker."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    at = datetime.now(UTC) - timedelta(minutes=1)
    for name in names:
        record = inventory(name, at)
        producer.send(state_topic, key=record_key(record).encode(), value=encode_node_record(record))
    producer.flush()
    producer.close()
    engine = make_engine(db)
    deadline = time.monotonic() + 120
    stored = 0
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            stored = conn.execute(sa.text("select count(distinct node) from node_state where kind = 'inventory'")
                                  ).scalar_one()
        if stored >= len(names):
            break
        time.sleep(0.2)
    engine.dispose()
    assert stored >= len(names), f"{stored} of {len(names)} inventories stored:\n" + worker.log_tail()


def _quarantine_latencies(bootstrap: str, kernel_topic: str, names: list[str], nodes: TimedCluster,
                          worker: WorkerProcess, timeout: float, executor: CordonExecutor) -> list[float]:
    """One Xid 48 line per node after a warm-up node; ms from the send to the GPU's rule."""
    latencies: list[float] = []
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)

    def send(name: str, n: int) -> None:
        line = Kmsg(name, boot_id="bench", seq=n).xid(FAULTY, 48, datetime.now(UTC), text="DBE (double bit error)")
        producer.send(kernel_topic, key=name.encode(), value=encode_node_record(line))
        producer.flush()

    warm = names[0]
    send(warm, 0)
    deadline = time.monotonic() + 90
    while warm not in nodes.quarantined_at and time.monotonic() < deadline:
        time.sleep(0.05)
    assert warm in nodes.quarantined_at, "warm-up quarantine never happened:\n" + worker.log_tail()
    for n, name in enumerate(names[1:], 1):
        t0 = time.perf_counter()
        send(name, n)
        deadline = time.monotonic() + timeout
        while name not in nodes.quarantined_at and time.monotonic() < deadline:
            time.sleep(0.002)
        assert name in nodes.quarantined_at, (f"{name}'s GPU not quarantined in {timeout} s; the last actions: "
                                              + "\n".join(r.model_dump_json() for r in executor.store.recent(4)))
        latencies.append((nodes.quarantined_at[name] - t0) * 1000)
    producer.close()
    return latencies


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=30, help="nodes, one measured quarantine each")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for one quarantine")
    args = ap.parse_args()
    fetch()
    controlplane = load_controlplane()
    run = uuid.uuid4().hex[:6]
    latencies: list[float] = []
    policy = CordonPolicy(
        rules=(Rule(name="dbe-quarantine", match=Match(xids=(48,)), action="quarantine_gpu"), *CordonPolicy().rules),
        breaker=Breaker(max_pool_share=1.0, max_per_hour=100_000))
    with tempfile.TemporaryDirectory(prefix="quarantine-pipeline-") as tmp, LocalKafka(num_partitions=2) as kafka:
        plane = controlplane.start()
        worker: WorkerProcess | None = None
        nodes: TimedCluster | None = None
        stop = threading.Event()
        try:
            with client.ApiClient(make_configuration(plane, "admin")) as admin, \
                    client.ApiClient(make_configuration(plane, "worker")) as as_worker:
                names = _create_nodes(admin, args.nodes)
                db = f"sqlite:///{tmp}/xidpipe.db"
                settings = WorkerSettings(
                    bootstrap_servers=kafka.bootstrap, database_url=db, app_id=f"bench-{run}", partitions=2,
                    topic_prefix=f"bench-{run}.", datadir=Path(tmp) / "faust", session_timeout_s=6.0,
                    heartbeat_interval_s=1.0, commit_interval_s=0.5)
                prepare(settings)
                worker = WorkerProcess(settings, Path(tmp) / "worker.log").start()
                topics = topology(settings.topic_prefix, settings.partitions)
                _inventories(kafka.bootstrap, topics.state.name, names, db, worker)
                nodes = TimedCluster(as_worker, reporting_instance="quarantine-pipeline-bench")
                executor = CordonExecutor(policy, JsonlActionStore(Path(tmp) / "actions.jsonl"), nodes)
                sinks = build_sinks(SinkSettings(outbox_dir=Path(tmp) / "outbox", group_wait_s=0), db)
                respond = RespondSettings(bootstrap_servers=kafka.bootstrap, topic_prefix=settings.topic_prefix,
                                          database_url=db, group_id=f"bench-responder-{run}")
                responder = build_responder(respond, executor, sinks)

                threading.Thread(target=_run_responder, args=(respond, responder, stop), daemon=True).start()
                latencies = _quarantine_latencies(kafka.bootstrap, topics.kernel.name, names, nodes, worker,
                                                  args.timeout, executor)
                rules = client.ResourceV1Api(admin).list_device_taint_rule().items
                schedulable = sum(1 for n in client.CoreV1Api(admin).list_node().items
                                  if not (n.spec and n.spec.unschedulable))
                version = client.VersionApi(admin).get_code().git_version
        finally:
            stop.set()
            if nodes is not None:
                nodes.close()
            if worker is not None:
                worker.terminate()
            plane.stop()
    print(json.dumps({
        "benchmark": "quarantine_pipeline",
        "apiserver": version,
        "kafka": "4.0.2 (local)",
        "samples": len(latencies),
        "device_taint_rules": len(rules),
        "nodes_schedulable": schedulable,
        "xid_line_to_device_taint_rule_ms": percentiles(latencies),
        "target_p99_ms": 1000,
        "meets_target": percentiles(latencies)["p99"] <= 1000,
        "machine": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
