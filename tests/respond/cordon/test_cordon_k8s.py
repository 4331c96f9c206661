"""Cordon actions against the real kube-apiserver, acting as the worker's RBAC identity (admin only
sets the scene and inspects)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client

from models.cordon import ANN_CORDONED_AT, ANN_INCIDENT, ANN_OCCURRENCES, ANN_RELEASED_BY, TAINT_KEY
from models.cordon_policy import Breaker, CordonPolicy
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import FleetAlert
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon.port import Conflict, NodeRead
from respond.cordon.retry import Backoff
from tests.kube import unique
from tests.respond.cordon.conftest import ExecutorFactory, NodeFactory, xid79


def taints(node: client.V1Node) -> list[tuple[str, str | None, str]]:
    return [(t.key, t.value, t.effect) for t in (node.spec.taints or [])]


def gpu_condition(node: client.V1Node) -> client.V1NodeCondition | None:
    return next((c for c in node.status.conditions or [] if c.type == "GPUHealthy"), None)


def node_events(admin_core: client.CoreV1Api, node: str) -> list[client.CoreV1Event]:
    return list(admin_core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items)


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_xid79_cordons_taints_sets_condition_and_records_event(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory, action_log: Path
) -> None:
    pool = unique("pool")
    name = make_node(pool=pool)
    req = xid79(name)
    before_rv = admin_core.read_node(name).metadata.resource_version

    result = make_executor().handle(req)

    assert (result.outcome, result.decision) == ("done", "cordon"), result.reason
    node = admin_core.read_node(name)
    assert node.spec.unschedulable is True
    # Ours added; the other owner's taint and admission's not-ready taint kept.
    assert taints(node) == [
        ("example.com/other-owner", None, "NoSchedule"),
        ("node.kubernetes.io/not-ready", None, "NoSchedule"),
        (TAINT_KEY, "gpu_lost", "NoSchedule"),
    ]
    annotations = node.metadata.annotations
    assert annotations[ANN_INCIDENT] == req.incident_id
    assert "rule gpu-lost" in annotations["xidpipe.io/cordon-reason"]
    assert ANN_CORDONED_AT in annotations
    condition = gpu_condition(node)
    assert condition is not None
    assert (condition.status, condition.reason) == ("False", "GPUFallenOffBus")
    assert req.incident_id in condition.message and "Xid 79" in condition.message
    events = node_events(admin_core, name)
    assert len(events) == 1
    assert events[0].type == "Warning" and events[0].reason == "GPUFallenOffBus"
    assert events[0].reporting_component == "xidpipe.io/worker"
    assert "rule gpu-lost" in events[0].message
    assert set(result.changes) == {"unschedulable", "taint", "annotations", "condition", "event"}
    # Recorded under the lock, right after the cordon's write (the condition and Event follow it).
    [rec] = records(action_log)
    assert (rec["action"], rec["outcome"], rec["node"], rec["incident_id"]) == ("cordon", "done", name,
                                                                                   req.incident_id)
    assert set(rec["details"]["changes"]) == {"unschedulable", "taint", "annotations"}
    assert rec["details"]["resource_version"] == result.resource_version
    assert rec["details"]["pool"] == pool  # as read for the decision: the reliability figures' pool
    assert int(result.resource_version or 0) > int(before_rv)


def test_redelivery_changes_nothing(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory, action_log: Path
) -> None:
    name = make_node(pool=unique("pool"))
    req = xid79(name)
    executor = make_executor()
    executor.handle(req)
    before = admin_core.read_node(name)

    again = executor.handle(req)
    make_executor().handle(req.model_copy())  # another worker instance gets the same message

    after = admin_core.read_node(name)
    assert (again.outcome, again.decision) == ("noop", "already_cordoned")
    assert after.metadata.resource_version == before.metadata.resource_version
    assert after.metadata.annotations == before.metadata.annotations
    assert [k for k, _, _ in taints(after)].count(TAINT_KEY) == 1
    assert len(node_events(admin_core, name)) == 1
    assert [r["outcome"] for r in records(action_log)] == ["done", "noop", "noop"]


def test_repeat_updates_the_event_series_not_a_new_event(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    name = make_node(pool=unique("pool"))
    req = xid79(name)
    executor = make_executor()
    executor.handle(req)

    repeat = executor.handle(req.model_copy(update={"count": 3}))
    executor.handle(req.model_copy(update={"count": 3}))  # its redelivery

    assert (repeat.action, repeat.outcome) == ("repeat", "done")
    events = client.EventsV1Api(admin_core.api_client).list_namespaced_event(
        "default", field_selector=f"regarding.name={name}").items
    assert len(events) == 1
    assert events[0].series.count == 3
    assert admin_core.read_node(name).metadata.annotations[ANN_OCCURRENCES] == "3"


class HumanEditsBeforeOurWrite(KubeNodes):
    """Plays an operator who edits the node's taints between our read and our write."""

    def __init__(self, *args: Any, human: client.CoreV1Api, edits: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.human, self.edits, self.conflicts = human, edits, 0

    def apply_cordon(self, current: NodeRead, *args: Any) -> tuple[list[str], NodeRead]:
        if self.edits:
            self.edits -= 1
            name = current.view.name
            node = self.human.read_node(name)
            extra = {"key": f"example.com/maintenance-{self.edits}", "value": "disk", "effect": "NoSchedule"}
            self.human.patch_node(name, {"spec": {"taints": [
                *self.human.api_client.sanitize_for_serialization(node.spec.taints), extra]}})
        try:
            return super().apply_cordon(current, *args)
        except Conflict:
            self.conflicts += 1
            raise


def test_concurrent_human_taint_edit_is_preserved(
    admin_core: client.CoreV1Api, worker_client: client.ApiClient, make_node: NodeFactory,
    make_executor: ExecutorFactory,
) -> None:
    name = make_node(pool=unique("pool"))
    nodes = HumanEditsBeforeOurWrite(worker_client, reporting_instance="t", human=admin_core, edits=2)

    result = make_executor(nodes=nodes).handle(xid79(name))

    assert result.outcome == "done", result.reason
    assert nodes.conflicts == 2  # our stale writes were refused by the resourceVersion guard
    keys = [k for k, _, _ in taints(admin_core.read_node(name))]
    assert keys == ["example.com/other-owner", "node.kubernetes.io/not-ready", "example.com/maintenance-1",
                    "example.com/maintenance-0", TAINT_KEY]


def test_human_cordoned_node_is_neither_annotated_nor_released(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    name = make_node(pool=unique("pool"), unschedulable=True)
    before = admin_core.read_node(name)
    executor = make_executor()

    cordon = executor.handle(xid79(name))
    release = executor.release(name, by="ops", reason="back to service")

    after = admin_core.read_node(name)
    assert (cordon.outcome, cordon.decision) == ("skipped", "foreign_cordon")
    assert (release.outcome, release.decision) == ("refused", "refuse")
    assert "not by xidpipe" in release.reason
    assert after.metadata.resource_version == before.metadata.resource_version
    assert after.spec.unschedulable is True and not after.metadata.annotations
    assert gpu_condition(after) is None and node_events(admin_core, name) == []


def test_breaker_trips_at_the_pool_share_and_holds_until_reset(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory, action_log: Path
) -> None:
    pool = unique("pool")
    names = [make_node(pool=pool) for _ in range(10)]
    raised: list[FleetAlert] = []
    policy = CordonPolicy(breaker=Breaker(max_pool_share=0.2, min_nodes=1, max_per_hour=100))
    executor = make_executor(policy, on_fleet_alert=raised.append)

    results = [executor.handle(xid79(n)) for n in names[:4]]

    assert [r.decision for r in results] == ["cordon", "cordon", "trip_breaker", "breaker_open"]
    assert [r.outcome for r in results] == ["done", "done", "blocked", "skipped"]
    assert "pool '" + pool + "' has 2 of 10 nodes cordoned" in results[2].reason
    assert len(raised) == 1 and raised[0].pool == pool and raised[0].node == names[2]
    cordoned = [n for n in names if admin_core.read_node(n).spec.unschedulable]
    assert cordoned == names[:2]
    for n in names[2:4]:
        node = admin_core.read_node(n)
        assert not node.metadata.annotations and TAINT_KEY not in [k for k, _, _ in taints(node)]
    # The trip is persisted: a restarted worker still refuses.
    assert JsonlActionStore(action_log).breaker().tripped
    assert make_executor(policy).handle(xid79(names[5])).decision == "breaker_open"

    executor.reset_breaker(by="ops", reason="driver rollback done")
    assert executor.release(names[0], by="ops", reason="GPU replaced").outcome == "done"
    after_reset = executor.handle(xid79(names[2]))

    assert (after_reset.decision, after_reset.outcome) == ("cordon", "done")
    assert not JsonlActionStore(action_log).breaker().tripped


def test_breaker_trips_at_the_hourly_count(make_node: NodeFactory, make_executor: ExecutorFactory) -> None:
    policy = CordonPolicy(breaker=Breaker(max_per_hour=2))
    executor = make_executor(policy)

    decisions = [executor.handle(xid79(make_node(pool=unique("pool")))).decision for _ in range(3)]

    assert decisions == ["cordon", "cordon", "trip_breaker"]


def test_release_lifts_only_xidpipes_cordon_and_records_who(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory, action_log: Path
) -> None:
    name = make_node(pool=unique("pool"))
    req = xid79(name)
    executor = make_executor()
    executor.handle(req)

    wrong = executor.release(name, by="ops", reason="x", incident_id="some-other-incident")
    done = executor.release(name, by="alice", reason="GPU reseated, burn-in passed", incident_id=req.incident_id)

    assert wrong.outcome == "refused" and "not some-other-incident" in wrong.reason
    assert done.outcome == "done", done.reason
    node = admin_core.read_node(name)
    assert not node.spec.unschedulable
    assert [k for k, _, _ in taints(node)] == ["example.com/other-owner", "node.kubernetes.io/not-ready"]
    assert ANN_CORDONED_AT not in node.metadata.annotations and ANN_INCIDENT not in node.metadata.annotations
    assert node.metadata.annotations[ANN_RELEASED_BY] == "alice"
    condition = gpu_condition(node)
    assert condition is not None and (condition.status, condition.reason) == ("True", "ReleasedByOperator")
    assert "alice" in condition.message
    assert [(r["action"], r["outcome"], r["actor"]) for r in records(action_log)][-2:] == [
        ("release", "refused", "ops"), ("release", "done", "alice")]
    # Released twice: nothing of xidpipe's is left to lift.
    assert executor.release(name, by="alice", reason="again").outcome == "refused"


def test_forbidden_is_a_permanent_failure(
    nobody_client: client.ApiClient, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    name = make_node(pool=unique("pool"))

    result = make_executor(api_client=nobody_client).handle(xid79(name))

    assert (result.outcome, result.retryable) == ("failed", False)
    assert "403" in result.reason


def test_missing_node_is_reported(make_executor: ExecutorFactory) -> None:
    result = make_executor().handle(xid79(unique("no-such-node")))

    assert (result.outcome, result.decision) == ("failed", "node_missing")


def test_unreachable_api_server_is_a_retryable_failure(worker_configuration: client.Configuration,
                                                       make_executor: ExecutorFactory) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = client.Configuration(host=f"https://127.0.0.1:{port}", api_key=worker_configuration.api_key,
                                api_key_prefix=worker_configuration.api_key_prefix)
    conf.retries = 0
    with client.ApiClient(conf) as api:
        nodes = KubeNodes(api, reporting_instance="t", backoff=Backoff(deadline_s=0.6, initial_s=0.05))
        result = make_executor(nodes=nodes).handle(xid79("gpu-node-x"))

    assert (result.outcome, result.retryable) == ("failed", True)
    assert "still failing" in result.reason


def test_dry_run_decides_and_records_but_changes_nothing(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory, action_log: Path
) -> None:
    name = make_node(pool=unique("pool"))
    before = admin_core.read_node(name)

    result = make_executor(CordonPolicy(dry_run=True)).handle(xid79(name))

    assert (result.outcome, result.decision, result.dry_run) == ("dry_run", "cordon", True)
    assert admin_core.read_node(name).metadata.resource_version == before.metadata.resource_version
    assert node_events(admin_core, name) == []
    assert [(r["outcome"], r["dry_run"]) for r in records(action_log)] == [("dry_run", True)]


async def test_the_async_wrapper_runs_the_action_off_the_event_loop(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    import asyncio
    import threading

    name = make_node(pool=unique("pool"))
    executor = make_executor()
    ticks = 0
    loop_thread = threading.get_ident()

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        result = await executor.handle_async(xid79(name))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert result.outcome == "done" and admin_core.read_node(name).spec.unschedulable
    assert ticks > 0 and threading.get_ident() == loop_thread  # the loop kept running meanwhile


def test_a_concurrent_burst_cordons_exactly_the_pool_share(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    pool = unique("pool")
    names = [make_node(pool=pool) for _ in range(10)]
    executor = make_executor(CordonPolicy(breaker=Breaker(max_pool_share=0.3, max_per_hour=100)))

    with ThreadPoolExecutor(8) as threads:
        results = list(threads.map(lambda n: executor.handle(xid79(n)), names))

    decisions = sorted(r.decision or "" for r in results)
    assert decisions.count("cordon") == 3 and decisions.count("trip_breaker") == 1
    assert decisions.count("breaker_open") == 6
    assert sum(1 for n in names if admin_core.read_node(n).spec.unschedulable) == 3
