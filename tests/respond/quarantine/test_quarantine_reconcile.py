"""xidpipe's DeviceTaintRules outlive the responder and are reconciled with the incidents (on the
test cluster, with the history the stream's store wrote): a restarted responder finds the rule and
adds none; a rule whose incident people closed is removed; one an operator changed is left alone and
reported once; one someone deleted stops showing as held. And `xidpipe node release --gpu` as an
operator runs it, as the worker's identity."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kubernetes import client
from sqlalchemy.orm import Session

from history.cordon_inputs import cordon_request
from history.engine import make_engine
from history.quarantines import active_quarantines
from history.tables import Incident
from models.cordon_policy import Breaker
from models.quarantine import LABEL_MANAGED_BY, rule_name
from respond.cordon.action_log import SqlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.retry import Backoff
from respond.quarantine.kube_cluster import KubeCluster
from respond.quarantine.reconcile import QuarantineReconciler
from tests.cluster import publish_gpu_slice
from tests.kube import unique
from tests.respond.quarantine.conftest import history_db, quarantine_policy
from tests.streams.records import uuid
from xidpipe.cli import main

pytestmark = pytest.mark.k8s
REPO = Path(__file__).resolve().parents[3]


def executor_on(worker: client.ApiClient, engine: sa.Engine) -> CordonExecutor:
    kube = KubeCluster(worker, reporting_instance="xidpipe-test", backoff=Backoff(deadline_s=10.0))
    # A node of its own pool: the whole pool's GPUs may be quarantined here.
    return CordonExecutor(quarantine_policy(breaker=Breaker(max_pool_share=1.0)), SqlActionStore(engine), kube)


def quarantine_each(executor: CordonExecutor, engine: sa.Engine, node: str) -> dict[str, str]:
    """Every open incident of the node handled by the executor; {GPU UUID: incident id}."""
    with Session(engine) as s:
        rows = s.scalars(sa.select(Incident).where(Incident.node == node)).all()
        reqs = [cordon_request(s, r, executor.policy.longest_window_s()) for r in rows]
    for req in reqs:
        result = executor.handle(req)
        assert (result.action, result.outcome) == ("quarantine", "done"), result.reason
    return {r.gpu: r.incident_id for r in reqs}


def rules_of(resource: client.ResourceV1Api, node: str) -> dict[str, Any]:
    rules = resource.list_device_taint_rule(label_selector=f"{LABEL_MANAGED_BY}=xidpipe").items
    return {r.metadata.name: r for r in rules if r.spec.device_selector.pool == node}


def actions(engine: sa.Engine, kind: str) -> list[Any]:
    return [r for r in SqlActionStore(engine).recent(500) if r.action == kind]


def test_rules_outlive_a_restart_and_are_reconciled_with_the_incidents(
        kwok_node: Callable[..., Any], cluster_admin_client: client.ApiClient, cluster_worker_client: client.ApiClient,
        resource: client.ResourceV1Api, tmp_path: Path) -> None:
    node = kwok_node(labels={"xidpipe.io/pool": unique("pool")}).metadata.name
    publish_gpu_slice(cluster_admin_client, node, uuids=[uuid(node, i) for i in range(8)])
    url = history_db(tmp_path / "x.db", node, [1, 2, 5])
    engine = make_engine(url)
    first = executor_on(cluster_worker_client, engine)
    incidents = quarantine_each(first, engine, node)
    first.nodes.close()  # type: ignore[union-attr]
    closed, changed, deleted = (uuid(node, i) for i in (1, 2, 5))

    # A restarted responder: the rules are found, none is added.
    again = executor_on(cluster_worker_client, engine)
    try:
        with Session(engine) as s:
            row = s.get(Incident, incidents[closed])
            assert row is not None
            redelivered = again.handle(cordon_request(s, row, again.policy.longest_window_s()))
        assert (redelivered.outcome, redelivered.decision) == ("noop", "already_quarantined")
        assert len(rules_of(resource, node)) == 3

        # People close one incident; an operator changes another's rule; someone deletes the third.
        assert main(["incidents", "transition", incidents[closed], "closed", "--reason", "card replaced",
                     "--database-url", url]) == 0
        resource.patch_device_taint_rule(rule_name(changed), {"spec": {"taint": {"effect": "NoExecute"}}},
                                         _content_type="application/merge-patch+json")
        resource.delete_device_taint_rule(rule_name(deleted))

        reconciler = QuarantineReconciler(engine, again)
        done = {r.rule: (r.action, r.outcome) for r in reconciler.pass_once()}

        assert done == {rule_name(closed): ("remove", "done"), rule_name(changed): ("report", ""),
                        rule_name(deleted): ("missing", "done")}
        assert set(rules_of(resource, node)) == {rule_name(changed)}  # left alone, as the operator made it
        assert rules_of(resource, node)[rule_name(changed)].spec.taint.effect == "NoExecute"
        [report] = actions(engine, "quarantine_changed")
        assert report.incident_id == incidents[changed] and "its effect is NoExecute, xidpipe wrote NoSchedule" \
            in report.reason
        released = {r.details["rule"]: r for r in actions(engine, "unquarantine")}
        assert released[rule_name(closed)].actor == "xidpipe-reconcile"
        assert released[rule_name(deleted)].decision == "rule_missing"
        with Session(engine) as s:
            assert set(active_quarantines(s)) == {changed}
        # A second pass changes nothing and reports nothing again.
        assert {r.rule: r.action for r in reconciler.pass_once()} == {rule_name(changed): "report"}
        assert len(actions(engine, "quarantine_changed")) == 1 and len(actions(engine, "unquarantine")) == 2
    finally:
        again.nodes.close()  # type: ignore[union-attr]
        engine.dispose()


def test_node_release_gpu_as_an_operator_runs_it(
        kwok_node: Callable[..., Any], cluster_admin_client: client.ApiClient, cluster_worker_client: client.ApiClient,
        resource: client.ResourceV1Api, cluster: Any, tmp_path: Path) -> None:
    node = kwok_node(labels={"xidpipe.io/pool": unique("pool")}).metadata.name
    publish_gpu_slice(cluster_admin_client, node, uuids=[uuid(node, i) for i in range(8)])
    url = history_db(tmp_path / "x.db", node, [0, 6])
    engine = make_engine(url)
    executor = executor_on(cluster_worker_client, engine)
    try:
        quarantine_each(executor, engine, node)
    finally:
        executor.nodes.close()  # type: ignore[union-attr]

    def release(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "xidpipe.cli", "node", "release", *args, "--reason", "reseated",
                               "--by", "alice", "--kubeconfig", str(cluster.kubeconfig), "--context", "worker",
                               "--database-url", url], capture_output=True, text=True, timeout=120, check=False,
                              cwd=REPO)

    wrong = release("gpu-node-elsewhere", "--gpu", uuid(node, 6))
    assert wrong.returncode == 4 and f"quarantined on node {node}, not gpu-node-elsewhere" in wrong.stderr
    one = release(node, "--gpu", uuid(node, 6))
    assert one.returncode == 0, one.stderr
    assert f"delete xidpipe's rule {rule_name(uuid(node, 6))}" in one.stdout
    assert set(rules_of(resource, node)) == {rule_name(uuid(node, 0))}
    rest = release(node)  # the node: no cordon of xidpipe's, its remaining GPU's rule
    assert rest.returncode == 0, rest.stderr
    assert rules_of(resource, node) == {}
    none_left = release(node)
    assert none_left.returncode == 4 and "carries no cordon by xidpipe" in none_left.stderr
    listed = json.loads(subprocess.run([sys.executable, "-m", "xidpipe.cli", "gpus", "list", "--database-url", url,
                                        "--json"], capture_output=True, text=True, check=True, cwd=REPO).stdout)
    assert not any(g["quarantine"] for g in listed["gpus"])
    engine.dispose()
