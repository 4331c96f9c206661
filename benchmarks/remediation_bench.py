#!/usr/bin/env python3
"""The remediation loop's stage latencies on the test control plane. Prints one JSON object.

Starts its own cluster with controllers (etcd, kube-apiserver, kube-scheduler, kube-controller-manager
and KWOK, from `make testcluster`), applies the chart's RBAC, creates --nodes KWOK GPU nodes and, for
each, an Xid 79 incident with its evidence in a SQLite history. The responder's cordon lane cordons
each node (as the worker identity), then its remediator advances the loops every --interval seconds
until every one is back in service: evidence, drain (one pod per node), one reboot Job (the test's
hosts reboot a node when its reboot Job appears: a new boot ID through KWOK), DCGM validation (a Job
KWOK completes with a real passing `dcgmi diag -j` output), return.

Reported, in seconds, per stage (p50, max over the loops): how long the loop stayed in it, from the
transitions the loop recorded; and `cordon_to_return`, from the cordon's loop opening to its return.
KWOK decides the Jobs' run time (1 s) and the reboot's (its node-reboot stage): the figures measure
xidpipe's own overhead on top of those, on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from history.engine import make_engine
from history.migrate import upgrade
from history.remediation_store import RemediationStore
from respond.cordon.action_log import SqlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon_lane import CordonLane
from respond.remediation.intake import Intake
from respond.remediation.kube_jobs import KubeRemediation
from respond.remediation.loop import Remediator
from tests.cluster import create_kwok_node, kwok_pod, load_cluster
from tests.kube import apply_rbac, make_configuration, unique
from tests.respond.remediation.conftest import NS, Hosts, policy, seed_incident

STAGES = ("queued", "evidence", "draining", "executing", "validating", "returning")


def spread(samples: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(samples), 3), "max": round(max(samples), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between the remediator's passes")
    args = ap.parse_args()

    started = time.perf_counter()
    plane = load_cluster().start_cluster()
    start_s = time.perf_counter() - started
    tmp = Path(tempfile.mkdtemp(prefix="xidpipe-remediation-bench-"))
    try:
        admin = client.ApiClient(make_configuration(plane, "admin"))
        apply_rbac(admin)
        try:
            client.NodeV1Api(admin).create_runtime_class(
                client.V1RuntimeClass(metadata=client.V1ObjectMeta(name="nvidia"), handler="nvidia"))
        except ApiException as exc:
            if exc.status != 409:
                raise
        core = client.CoreV1Api(admin)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="bench")))
        nodes = [create_kwok_node(core, unique("bench-gpu"), labels={"nvidia.com/gpu.present": "true"}).metadata.name
                 for _ in range(args.nodes)]
        for node in nodes:
            while True:  # the namespace's default service account is the controller's to make
                try:
                    core.create_namespaced_pod("bench", kwok_pod(unique("trainer"), gpus=8, node_name=node))
                    break
                except ApiException as exc:
                    if exc.status != 403:
                        raise
                    time.sleep(0.2)
        engine = make_engine(f"sqlite:///{tmp / 'history.db'}")
        upgrade(engine)
        pol = policy()
        worker = client.ApiClient(make_configuration(plane, "worker"))
        cluster = KubeRemediation(worker, namespace=NS, reporting_instance="bench")
        store = RemediationStore(engine)
        executor = CordonExecutor(pol, SqlActionStore(engine), cluster, ports=[Intake(store, pol)])
        lane, remediator = CordonLane(engine, executor), Remediator(store, cluster, executor)
        hosts = Hosts(admin).start()
        incidents = [seed_incident(engine, n, serial=f"16523200{i:05d}", pods=[]) for i, n in enumerate(nodes)]
        began = time.perf_counter()
        for incident in incidents:
            asyncio.run(lane.offer(incident))
        loops = [lp for i in incidents for lp in store.loops(incident_id=i)]
        while any(not (store.get(lp.loop_id) or lp).final for lp in loops):
            if time.perf_counter() - began > 600:
                raise SystemExit(f"loops not done in 600 s: {[store.get(lp.loop_id) for lp in loops]}")
            remediator.tick()
            time.sleep(args.interval)
        wall = time.perf_counter() - began
        hosts.stop()
        per_stage: dict[str, list[float]] = {s: [] for s in STAGES}
        totals, outcomes = [], []
        for lp in loops:
            steps = store.transitions(lp.loop_id)
            outcomes.append(steps[-1].to_stage)
            for before, after in itertools.pairwise(steps):
                if before.to_stage in per_stage:
                    per_stage[before.to_stage].append((after.at - before.at).total_seconds())
            totals.append((steps[-1].at - steps[0].at).total_seconds())
        cluster.close()
        engine.dispose()
    finally:
        plane.stop()
    print(json.dumps({
        "benchmark": "remediation_loop", "nodes": args.nodes, "interval_s": args.interval,
        "outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))},
        "stage_seconds": {s: spread(v) for s, v in per_stage.items() if v},
        "cordon_to_return_s": spread(totals), "wall_s": round(wall, 2), "cluster_start_s": round(start_s, 2),
        "kwok_job_runtime_s": 1.0,
        "machine": {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2),
                    "python": platform.python_version()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
