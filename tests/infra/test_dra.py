"""DRA on the test cluster: the scheduler allocates a ResourceClaim on a device of a node's
ResourceSlice (shaped like NVIDIA's DRA driver's), keeps new claims off a device that a
``NoSchedule`` DeviceTaintRule taints, and the controller-manager's device-taint-eviction controller
evicts the pod holding a device that a ``NoExecute`` rule taints (deletion timestamp, and the rule's
``EvictionInProgress`` condition)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster import GPU_DRIVER, kwok_pod, pod_phase, publish_gpu_slice, wait_for
from tests.kube import unique

pytestmark = pytest.mark.k8s
Claims = Callable[..., str]


@pytest.fixture
def resource(cluster_admin_client: client.ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(cluster_admin_client)


@pytest.fixture
def gpu_claim(resource: client.ResourceV1Api, cluster_namespace: str, gpu_device_class: str) -> Claims:
    """``make(count=1) -> name``: a ResourceClaim for ``count`` whole GPUs of the DeviceClass."""

    def make(count: int = 1) -> str:
        name = unique("gpus")
        resource.create_namespaced_resource_claim(cluster_namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": gpu_device_class, "allocationMode": "ExactCount", "count": count}}]}},
        })
        return name

    return make


@pytest.fixture
def taint_rules(resource: client.ResourceV1Api) -> Iterator[Callable[..., str]]:
    """``make(node, device, effect) -> name``: a DeviceTaintRule on one GPU, deleted after the test."""
    made: list[str] = []

    def make(node: str, device: str, effect: str) -> str:
        name = unique("gpu-fault")
        resource.create_device_taint_rule({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name},
            "spec": {"deviceSelector": {"driver": GPU_DRIVER, "pool": node, "device": device},
                     "taint": {"key": "xidpipe.io/gpu-fault", "value": "xid-48", "effect": effect}},
        })
        made.append(name)
        return name

    yield make
    for name in made:
        try:
            resource.delete_device_taint_rule(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def allocated_devices(resource: client.ResourceV1Api, namespace: str, claim: str) -> list[dict[str, Any]] | None:
    """The claim's allocation results (driver, pool, device), once the scheduler has allocated it."""
    found = resource.read_namespaced_resource_claim(claim, namespace)
    allocation = found.status.allocation if found.status else None
    return [{"driver": r.driver, "pool": r.pool, "device": r.device} for r in allocation.devices.results] \
        if allocation else None


def start_holder(core: client.CoreV1Api, namespace: str, node: str, claim: str, grace_s: int = 1) -> str:
    pod = kwok_pod(unique("trainer"), claims={"gpu": claim}, grace_s=grace_s)
    pod.spec.node_selector = {"kubernetes.io/hostname": node}
    return str(core.create_namespaced_pod(namespace, pod).metadata.name)


def test_the_scheduler_allocates_a_claim_on_a_device_of_the_nodes_slice(
        cluster_admin_client: client.ApiClient, cluster_core: client.CoreV1Api, resource: client.ResourceV1Api,
        cluster_namespace: str, kwok_node, gpu_claim: Claims) -> None:
    node = kwok_node().metadata.name
    slice_ = publish_gpu_slice(cluster_admin_client, node)
    uuids = {d["name"]: d["attributes"]["uuid"]["string"] for d in slice_["spec"]["devices"]}
    claim = gpu_claim()
    pod = start_holder(cluster_core, cluster_namespace, node, claim)

    [result] = wait_for(lambda: allocated_devices(resource, cluster_namespace, claim), "the claim's allocation")
    assert result["driver"] == GPU_DRIVER and result["pool"] == node and result["device"] in uuids
    running = wait_for(lambda: pod_phase(cluster_core, cluster_namespace, pod, {"Running"}), "the holder to run")
    assert running.spec.node_name == node
    reserved = resource.read_namespaced_resource_claim(claim, cluster_namespace).status.reserved_for
    assert [r.name for r in reserved] == [pod]


def test_a_no_schedule_rule_keeps_new_claims_off_the_tainted_gpu(
        cluster_admin_client: client.ApiClient, cluster_core: client.CoreV1Api, resource: client.ResourceV1Api,
        cluster_namespace: str, kwok_node, gpu_claim: Claims, taint_rules) -> None:
    node = kwok_node().metadata.name
    taint_rules(node, "gpu-0", "NoSchedule")  # the device an untainted allocation would take first
    publish_gpu_slice(cluster_admin_client, node)
    seven = gpu_claim(7)
    start_holder(cluster_core, cluster_namespace, node, seven)
    results = wait_for(lambda: allocated_devices(resource, cluster_namespace, seven), "seven GPUs allocated")
    assert sorted(r["device"] for r in results) == [f"gpu-{i}" for i in range(1, 8)]

    # Only the tainted GPU is left: a new claim for one GPU is not allocated, its pod not scheduled.
    one = gpu_claim(1)
    pod = start_holder(cluster_core, cluster_namespace, node, one)

    def unschedulable() -> client.V1PodCondition | None:
        conditions = cluster_core.read_namespaced_pod(pod, cluster_namespace).status.conditions or []
        return next((c for c in conditions if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

    refused = wait_for(unschedulable, "the scheduler to find no untainted GPU")
    assert allocated_devices(resource, cluster_namespace, one) is None
    assert "cannot allocate all claims" in refused.message, refused.message


def test_a_no_execute_rule_evicts_the_pod_holding_the_gpu(
        cluster_admin_client: client.ApiClient, cluster_core: client.CoreV1Api, resource: client.ResourceV1Api,
        cluster_namespace: str, kwok_node, gpu_claim: Claims, taint_rules) -> None:
    node = kwok_node().metadata.name
    publish_gpu_slice(cluster_admin_client, node)
    claim = gpu_claim()
    # A long grace period keeps the evicted pod Terminating while the test looks at it.
    holder = start_holder(cluster_core, cluster_namespace, node, claim, grace_s=60)
    wait_for(lambda: pod_phase(cluster_core, cluster_namespace, holder, {"Running"}), "the holder to run")
    [device] = allocated_devices(resource, cluster_namespace, claim) or []

    rule = taint_rules(node, device["device"], "NoExecute")

    def evicted() -> client.V1Pod | None:
        pod = cluster_core.read_namespaced_pod(holder, cluster_namespace)
        return pod if pod.metadata.deletion_timestamp else None

    assert wait_for(evicted, "the device-taint-eviction controller to delete the holder").metadata.deletion_timestamp

    def eviction_in_progress() -> dict[str, Any] | None:
        status = resource.read_device_taint_rule(rule).status
        return next(({"status": c.status, "reason": c.reason} for c in (status.conditions if status else None) or []
                     if c.type == "EvictionInProgress"), None)

    condition = wait_for(eviction_in_progress, "the rule's EvictionInProgress condition")
    assert condition["status"] == "True", condition  # the holder is still terminating (60 s grace)
