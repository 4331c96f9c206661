"""A responder killed (SIGKILL) at every step of a remediation loop neither repeats nor loses an effect:
the remediator runs in a child process (`remediator_child`, composed as `xidpipe respond` composes it)
that is killed as soon as the loop's state in SQL or its Jobs in the cluster change, and started again,
until the loop ends. Each stage is written before the effect it leads to, each effect is idempotent
by name, and each stage is asked again from the cluster after a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client
from sqlalchemy.orm import Session

from history.tables import GpuLedgerEvent, Incident
from respond.cordon.action_log import SqlActionStore
from tests.cluster import kwok_pod, wait_for
from tests.kube import unique
from tests.respond.remediation.conftest import NS, Hosts, jobs_on, policy, seed_incident

REPO = Path(__file__).resolve().parents[3]
STAGES = ["queued", "evidence", "draining", "executing", "validating", "returning", "returned"]


def start_child(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "tests.respond.remediation.remediator_child", str(config)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=log.open("ab"))


def test_killed_at_every_step_the_loop_does_each_thing_once(
        make_loops, kwok_node, hosts: Hosts, cluster: Any, cluster_core: client.CoreV1Api,
        cluster_admin_client: client.ApiClient, cluster_namespace: str, engine: Any, tmp_path: Path) -> None:
    pol = policy()
    loops = make_loops(pol)  # this process cordons; the child remediates
    node = kwok_node().metadata.name
    boot = cluster_core.read_node(node).status.node_info.boot_id
    trainer = cluster_core.create_namespaced_pod(cluster_namespace, kwok_pod(unique("trainer"), gpus=8, node_name=node))
    wait_for(lambda: cluster_core.read_namespaced_pod(trainer.metadata.name, cluster_namespace).status.phase
             == "Running", "the trainer to run")
    incident = seed_incident(engine, node, pods=[f"{cluster_namespace}/{trainer.metadata.name}/main"])
    loop_id = loops.offer(incident).loop_id
    config = tmp_path / "child.json"
    config.write_text(json.dumps({
        "database_url": str(engine.url), "server": cluster.server, "ca_file": str(cluster.ca_file),
        "token": cluster.token("worker"), "namespace": NS, "policy": pol.model_dump(mode="json"),
        "interval_s": 0.2}))
    batch = client.BatchV1Api(cluster_admin_client)
    log = tmp_path / "child.log"

    def state() -> tuple[Any, ...]:
        loop = loops.store.get(loop_id)
        assert loop is not None
        attempts = tuple((a.kind, a.outcome) for a in loops.store.attempts(loop_id))
        return loop.version, loop.stage, attempts, tuple(sorted(jobs_on(batch, loop_id)))

    killed_in: list[str] = []
    child = start_child(config, log)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    child.send_signal(signal.SIGKILL)  # killed as it starts its first pass: in the queue's admission
    child.wait(timeout=30)
    killed_in.append(state()[1])
    child = start_child(config, log)
    seen = state()
    deadline = time.monotonic() + 420
    try:
        while seen[1] != "returned":
            assert time.monotonic() < deadline, f"the loop did not end; {seen}; child log: {log.read_text()[-3000:]}"
            now = state()
            if now != seen:  # it did something: kill it right away, mid-step
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
                killed_in.append(now[1])
                seen = state()
                child = start_child(config, log)
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    assert set(STAGES[:-1]) <= set(killed_in), f"killed in {killed_in}"
    assert [t.to_stage for t in loops.store.transitions(loop_id)] == STAGES
    attempts = [(a.kind, a.seq, a.outcome, a.validated) for a in loops.store.attempts(loop_id)]
    assert attempts == [("reboot_node", 1, "succeeded", "passed"), ("validation", 1, "succeeded", None)]
    assert sorted(jobs_on(batch, loop_id).values()) == ["reboot", "validate"]  # one Job each
    assert len([j for j in hosts.rebooted if j in jobs_on(batch, loop_id)]) == 1  # one reboot
    after = cluster_core.read_node(node)
    assert after.status.node_info.boot_id != boot and not after.spec.unschedulable
    releases = [r for r in SqlActionStore(engine).recent(500) if r.action == "release" and r.node == node]
    assert [r.outcome for r in releases] == ["done"]  # one uncordon
    done = loops.store.get(loop_id)
    assert done is not None and done.details["drain"]["evicted"] == [f"{cluster_namespace}/{trainer.metadata.name}"]
    with Session(engine) as s:
        assert s.get(Incident, incident).lifecycle == "repaired"
        repaired = s.query(GpuLedgerEvent).filter_by(kind="repaired", node=node).count()
    assert repaired == 1
