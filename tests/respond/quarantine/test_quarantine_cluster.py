"""GPU quarantine on real components (tests/cluster.py: kube-apiserver, kube-scheduler,
kube-controller-manager, KWOK): Xid 48 on one GPU of a node whose ResourceSlice is shaped like
NVIDIA's DRA driver's gives one DeviceTaintRule on that device, the node stays schedulable, the
scheduler allocates new claims among the other seven, NoExecute evicts the pod holding it, release
makes it allocatable again, and a node without slices is cordoned instead. The executor acts as the
responder's identity with the chart's RBAC."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from models.quarantine import LABEL_INCIDENT, LABEL_MANAGED_BY, TAINT_KEY, incident_label, rule_name
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.retry import Backoff
from respond.quarantine.kube_cluster import KubeCluster
from respond.quarantine.release import release_node, release_quarantine
from tests.cluster import GPU_DRIVER, kwok_pod, pod_phase, wait_for
from tests.kube import make_configuration, unique
from tests.respond.quarantine.conftest import GpuNode, quarantine_policy, xid48

pytestmark = pytest.mark.k8s
Executors = Callable[..., CordonExecutor]


def our_rules(resource: client.ResourceV1Api, node: str) -> list[Any]:
    rules = resource.list_device_taint_rule(label_selector=f"{LABEL_MANAGED_BY}=xidpipe").items
    return [r for r in rules if r.spec.device_selector.pool == node]


def gpu_condition(core: client.CoreV1Api, node: str) -> client.V1NodeCondition | None:
    return next((c for c in core.read_node(node).status.conditions or [] if c.type == "GPUHealthy"), None)


def records(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def claim_for(resource: client.ResourceV1Api, namespace: str, device_class: str, count: int) -> str:
    name = unique("gpus")
    resource.create_namespaced_resource_claim(namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}}]}},
    })
    return name


def start_holder(core: client.CoreV1Api, namespace: str, node: str, claim: str, grace_s: int = 1) -> str:
    pod = kwok_pod(unique("trainer"), claims={"gpu": claim}, grace_s=grace_s)
    pod.spec.node_selector = {"kubernetes.io/hostname": node}
    return str(core.create_namespaced_pod(namespace, pod).metadata.name)


def allocated(resource: client.ResourceV1Api, namespace: str, claim: str) -> list[str] | None:
    found = resource.read_namespaced_resource_claim(claim, namespace)
    allocation = found.status.allocation if found.status else None
    return sorted(r.device for r in allocation.devices.results) if allocation else None


def test_xid48_quarantines_one_gpu_the_node_stays_schedulable_and_claims_take_the_other_seven(
        gpu_node: Callable[..., GpuNode], quarantine_executor: Executors, resource: client.ResourceV1Api,
        cluster_core: client.CoreV1Api, cluster_namespace: str, gpu_device_class: str, action_log: Path) -> None:
    node = gpu_node()
    req = xid48(node.name, node.uuids[3])
    executor = quarantine_executor()

    result = executor.handle(req)

    assert (result.action, result.outcome, result.decision) == ("quarantine", "done", "quarantine"), result.reason
    [rule] = our_rules(resource, node.name)
    assert rule.metadata.name == rule_name(node.uuids[3])
    assert rule.metadata.labels[LABEL_INCIDENT] == incident_label(req.incident_id)
    assert rule.metadata.annotations["xidpipe.io/incident"] == req.incident_id
    selector, taint = rule.spec.device_selector, rule.spec.taint
    assert (selector.driver, selector.pool, selector.device) == (GPU_DRIVER, node.name, "gpu-3")
    assert (taint.key, taint.value, taint.effect) == (TAINT_KEY, "memory", "NoSchedule")
    # The node stays schedulable: no cordon, no taint of xidpipe's; its condition counts the GPU.
    written = cluster_core.read_node(node.name)
    assert not written.spec.unschedulable
    assert all(t.key != TAINT_KEY for t in written.spec.taints or [])
    assert not any(k.startswith("xidpipe.io/") for k in written.metadata.annotations or {})
    condition = gpu_condition(cluster_core, node.name)
    assert condition is not None and (condition.status, condition.reason) == ("False", "GPUQuarantined")
    assert condition.message.startswith(f"1 of 8 GPUs quarantined by xidpipe: gpu-3 ({node.uuids[3]})")
    events = cluster_core.list_namespaced_event("default", field_selector=f"involvedObject.name={node.name}").items
    assert [e.reason for e in events if e.reporting_component == "xidpipe.io/worker"] == ["GPUQuarantined"]
    [rec] = records(action_log)
    assert (rec["action"], rec["outcome"], rec["details"]["rule"], rec["details"]["device"]) == (
        "quarantine", "done", rule.metadata.name, f"{GPU_DRIVER}/{node.name}/gpu-3")

    # A redelivery and a repeat change nothing: still one rule, one Event.
    assert executor.handle(req).outcome == "noop"
    repeat = executor.handle(req.model_copy(update={"count": 2}))
    assert (repeat.outcome, repeat.decision) == ("noop", "already_quarantined")
    assert len(our_rules(resource, node.name)) == 1
    events = cluster_core.list_namespaced_event("default", field_selector=f"involvedObject.name={node.name}").items
    assert len([e for e in events if e.reporting_component == "xidpipe.io/worker"]) == 1

    # The scheduler allocates a new claim for seven GPUs among the other seven.
    seven = claim_for(resource, cluster_namespace, gpu_device_class, 7)
    start_holder(cluster_core, cluster_namespace, node.name, seven)
    devices = wait_for(lambda: allocated(resource, cluster_namespace, seven), "seven GPUs allocated")
    assert devices == sorted(f"gpu-{i}" for i in range(8) if i != 3)


def test_no_execute_evicts_the_pod_holding_the_gpu(
        gpu_node: Callable[..., GpuNode], quarantine_executor: Executors, resource: client.ResourceV1Api,
        cluster_core: client.CoreV1Api, cluster_namespace: str, gpu_device_class: str) -> None:
    node = gpu_node()
    claim = claim_for(resource, cluster_namespace, gpu_device_class, 1)
    holder = start_holder(cluster_core, cluster_namespace, node.name, claim, grace_s=60)
    wait_for(lambda: pod_phase(cluster_core, cluster_namespace, holder, {"Running"}), "the holder to run")
    [device] = allocated(resource, cluster_namespace, claim) or []
    gpu = node.uuids[int(device.removeprefix("gpu-"))]

    result = quarantine_executor(quarantine_policy("NoExecute")).handle(xid48(node.name, gpu))

    assert (result.outcome, result.quarantine["effect"]) == ("done", "NoExecute"), result.reason

    def evicted() -> client.V1Pod | None:
        pod = cluster_core.read_namespaced_pod(holder, cluster_namespace)
        return pod if pod.metadata.deletion_timestamp else None

    assert wait_for(evicted, "the device-taint-eviction controller to delete the holder")
    condition = wait_for(lambda: _eviction(resource, rule_name(gpu)), "the rule's EvictionInProgress condition")
    assert condition.status == "True", condition


def _eviction(resource: client.ResourceV1Api, name: str) -> Any:
    status = resource.read_device_taint_rule(name).status
    return next((c for c in (status.conditions if status else None) or [] if c.type == "EvictionInProgress"), None)


def test_a_dry_run_writes_effect_none_which_reports_and_disturbs_nothing(
        gpu_node: Callable[..., GpuNode], quarantine_executor: Executors, resource: client.ResourceV1Api,
        cluster_core: client.CoreV1Api, cluster_namespace: str, gpu_device_class: str, action_log: Path) -> None:
    node = gpu_node()
    claim = claim_for(resource, cluster_namespace, gpu_device_class, 1)
    holder = start_holder(cluster_core, cluster_namespace, node.name, claim, grace_s=60)
    wait_for(lambda: pod_phase(cluster_core, cluster_namespace, holder, {"Running"}), "the holder to run")
    [device] = allocated(resource, cluster_namespace, claim) or []
    gpu = node.uuids[int(device.removeprefix("gpu-"))]

    result = quarantine_executor(quarantine_policy("NoExecute", dry_run=True)).handle(xid48(node.name, gpu))

    assert (result.outcome, result.dry_run, result.quarantine["effect"]) == ("dry_run", True, "None"), result.reason
    [rule] = our_rules(resource, node.name)
    assert rule.spec.taint.effect == "None"
    condition = wait_for(lambda: _eviction(resource, rule.metadata.name), "the None rule's status")
    assert condition.status == "False" and "1" in (condition.message or ""), condition  # what NoExecute would evict
    pod = cluster_core.read_namespaced_pod(holder, cluster_namespace)
    assert pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"
    assert gpu_condition(cluster_core, node.name) is None  # a dry run's rule holds no GPU
    assert [r["outcome"] for r in records(action_log)] == ["dry_run"]


def test_release_deletes_the_rule_and_the_gpu_is_allocatable_again(
        gpu_node: Callable[..., GpuNode], quarantine_executor: Executors, resource: client.ResourceV1Api,
        cluster_core: client.CoreV1Api, cluster_namespace: str, gpu_device_class: str, action_log: Path) -> None:
    node = gpu_node()
    executor = quarantine_executor()
    req = xid48(node.name, node.uuids[0])
    assert executor.handle(req).outcome == "done"
    eight = claim_for(resource, cluster_namespace, gpu_device_class, 8)
    start_holder(cluster_core, cluster_namespace, node.name, eight)

    def unschedulable() -> bool:
        pods = cluster_core.list_namespaced_pod(cluster_namespace).items
        return any(c.reason == "Unschedulable" for p in pods for c in p.status.conditions or [])

    wait_for(unschedulable, "the scheduler to find only seven untainted GPUs")
    assert allocated(resource, cluster_namespace, eight) is None
    # Another incident's release is refused; the node release with this incident deletes the rule.
    other = release_quarantine(executor, by="alice", reason="wrong one", gpu=node.uuids[0], incident_id="v2:other")
    assert other is not None and other.outcome == "refused" and "not v2:other" in other.reason

    released = release_node(executor, node.name, by="alice", reason="card reseated", incident_id=req.incident_id)

    assert released.outcome == "done", released.reason
    assert {"device_taint_rule", "condition", "event"} <= set(released.changes)
    assert our_rules(resource, node.name) == []
    devices = wait_for(lambda: allocated(resource, cluster_namespace, eight), "all eight GPUs allocated")
    assert devices == [f"gpu-{i}" for i in range(8)]
    condition = gpu_condition(cluster_core, node.name)
    assert condition is not None and (condition.status, condition.reason) == ("True", "GPUsReleased")
    unq = [r for r in records(action_log) if r["action"] == "unquarantine"]
    assert [(r["outcome"], r["actor"]) for r in unq] == [("refused", "alice"), ("done", "alice")]
    assert unq[1]["incident_id"] == req.incident_id and unq[1]["details"]["rule"] == rule_name(node.uuids[0])
    # Nothing left: a second release is refused, and the redelivered request quarantines again.
    again = release_node(executor, node.name, by="alice", reason="again")
    assert again.outcome == "refused" and "carries no cordon by xidpipe" in again.reason


def test_a_node_without_slices_is_cordoned_and_the_decision_says_why(
        gpu_node: Callable[..., GpuNode], quarantine_executor: Executors, resource: client.ResourceV1Api,
        cluster_core: client.CoreV1Api) -> None:
    node = gpu_node(slices=False)
    result = quarantine_executor().handle(xid48(node.name, "GPU-5d8c2a1e-0000-4c1e-9a33-51f0c2d4e8aa"))
    assert (result.action, result.outcome, result.decision) == ("cordon", "done", "cordon"), result.reason
    assert f"node {node.name} publishes no ResourceSlice of driver {GPU_DRIVER}" in result.reason
    assert "the node is cordoned instead" in result.reason and "fallback" in result.quarantine
    assert cluster_core.read_node(node.name).spec.unschedulable is True
    assert our_rules(resource, node.name) == []


def test_a_gpu_its_slice_does_not_list_is_cordoned(
        gpu_node: Callable[..., GpuNode], quarantine_executor: Executors, cluster_core: client.CoreV1Api) -> None:
    node = gpu_node()
    result = quarantine_executor().handle(xid48(node.name, "GPU-00000000-0000-4000-8000-000000000000"))
    assert (result.action, result.decision) == ("cordon", "cordon"), result.reason
    assert "no ResourceSlice device of driver gpu.nvidia.com on node" in result.reason
    assert cluster_core.read_node(node.name).spec.unschedulable is True


def test_without_rights_on_dra_objects_the_node_is_cordoned_at_once(
        gpu_node: Callable[..., GpuNode], cluster: Any, cluster_admin_client: client.ApiClient,
        cluster_core: client.CoreV1Api) -> None:
    """A responder whose identity may not read ResourceSlices or DeviceTaintRules (a chart from before
    quarantine) cordons the node as the fallback, without waiting out the caches."""
    rbac = client.RbacAuthorizationV1Api(cluster_admin_client)
    name = unique("nodes-only")
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}]})
    rbac.create_cluster_role_binding({"metadata": {"name": name}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "nobody"}]})
    node = gpu_node()
    try:
        with client.ApiClient(make_configuration(cluster, "nobody")) as nobody:
            kube = KubeCluster(nobody, reporting_instance="xidpipe-test", backoff=Backoff(deadline_s=5.0))
            try:
                log = JsonlActionStore(Path(cluster.workdir) / f"{name}.jsonl")
                executor = CordonExecutor(quarantine_policy(), log, kube)
                started = time.monotonic()
                result = executor.handle(xid48(node.name, node.uuids[2]))
                took = time.monotonic() - started
                cordoned = cluster_core.read_node(node.name).spec.unschedulable
                released = release_node(executor, node.name, by="alice", reason="fixed")
            finally:
                kube.close()
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
    assert (result.action, result.outcome) == ("cordon", "done"), result.reason
    assert "the ResourceSlices of driver gpu.nvidia.com could not be read" in result.reason
    assert took < 4.0, took  # the caches' wait is 5 s: their failure ends it
    assert cordoned is True
    # The release lifts the cordon; rules it cannot read are none of xidpipe's.
    assert (released.action, released.outcome) == ("release", "done"), released.reason
    assert not cluster_core.read_node(node.name).spec.unschedulable


def test_a_node_with_a_quarantined_gpu_is_cordoned_within_the_breaker_and_released_to_its_quarantine(
        gpu_node: Callable[..., GpuNode], quarantine_executor: Executors, resource: client.ResourceV1Api,
        cluster_core: client.CoreV1Api) -> None:
    """One node in its own pool (at most 1 node held, at least 1 GPU): the GPU's quarantine holds the
    node, so the cordon of another GPU's Xid 79 adds no node to the pool's count and passes the breaker;
    lifting that cordon leaves the node's condition saying what is still quarantined."""
    node = gpu_node()
    executor = quarantine_executor()
    assert executor.handle(xid48(node.name, node.uuids[1])).outcome == "done"
    lost = xid48(node.name, node.uuids[4], family="gpu_lost", xids=(79,), immediate_actions=("RESTART_BM",))

    cordon = executor.handle(lost)

    assert (cordon.action, cordon.outcome) == ("cordon", "done"), cordon.reason
    assert gpu_condition(cluster_core, node.name).reason == "GPUFallenOffBus"  # the cordon's says more
    released = release_node(executor, node.name, by="alice", reason="GPU 4 reseated", incident_id=lost.incident_id)
    assert released.outcome == "done" and "condition" in released.changes, released
    assert not cluster_core.read_node(node.name).spec.unschedulable
    condition = gpu_condition(cluster_core, node.name)
    assert (condition.status, condition.reason) == ("False", "GPUQuarantined")
    assert condition.message.startswith(f"1 of 8 GPUs quarantined by xidpipe: gpu-1 ({node.uuids[1]})")
    assert [r.metadata.name for r in our_rules(resource, node.name)] == [rule_name(node.uuids[1])]
