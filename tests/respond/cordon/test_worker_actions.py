"""What the worker does to a faulty GPU node is allowed by the chart's RBAC, against a real API server."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kube import PodFactory, unique

GPU_TAINT = {"key": "xidpipe.io/gpu-fault", "value": "xid-79", "effect": "NoSchedule"}


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def wire_taints(api_client: client.ApiClient, node: client.V1Node) -> list[dict[str, Any]]:
    return list(api_client.sanitize_for_serialization(node.spec.taints or []))


def test_cordon(worker_core: client.CoreV1Api, node: client.V1Node) -> None:
    patched = worker_core.patch_node(node.metadata.name, {"spec": {"unschedulable": True}})

    assert patched.spec.unschedulable is True


def test_taint_by_read_modify_write_with_resource_version_guard(
    worker_core: client.CoreV1Api, worker_client: client.ApiClient, node: client.V1Node
) -> None:
    current = worker_core.read_node(node.metadata.name)
    taints = [*wire_taints(worker_client, current), GPU_TAINT]

    patched = worker_core.patch_node(
        node.metadata.name,
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": current.metadata.resource_version},
            {"op": "add", "path": "/spec/taints", "value": taints},
        ],
    )

    # Other owners' taints are kept: ours, and node.kubernetes.io/not-ready from admission.
    assert [t.key for t in patched.spec.taints] == [t.key for t in current.spec.taints] + [GPU_TAINT["key"]]
    assert "example.com/other-owner" in [t.key for t in patched.spec.taints]


def test_annotate(worker_core: client.CoreV1Api, node: client.V1Node) -> None:
    patched = worker_core.patch_node(
        node.metadata.name,
        {"metadata": {"annotations": {"xidpipe.io/incident": "gpu-node-1/GPU-0/xid-79"}}},
        _content_type="application/merge-patch+json",
    )

    assert patched.metadata.annotations["xidpipe.io/incident"] == "gpu-node-1/GPU-0/xid-79"


def test_gpu_healthy_condition_on_node_status(worker_core: client.CoreV1Api, node: client.V1Node) -> None:
    stamp = now().replace(microsecond=0)
    condition = {
        "type": "GPUHealthy",
        "status": "False",
        "reason": "XidGPUFallenOffBus",
        "message": "Xid 79 on GPU-0 (0000:3b:00.0)",
        "lastHeartbeatTime": stamp.isoformat(),
        "lastTransitionTime": stamp.isoformat(),
    }

    patched = worker_core.patch_node_status(node.metadata.name, {"status": {"conditions": [condition]}})

    gpu = [c for c in patched.status.conditions if c.type == "GPUHealthy"]
    assert len(gpu) == 1
    assert (gpu[0].status, gpu[0].reason) == ("False", "XidGPUFallenOffBus")


def test_core_event_on_node_create_and_patch(worker_core: client.CoreV1Api, node: client.V1Node) -> None:
    name = node.metadata.name
    stamp = now()
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=unique(f"{name}.gpu-fault"), namespace="default"),
        involved_object=client.V1ObjectReference(kind="Node", name=name, uid=name, api_version="v1"),
        reason="GPUFault",
        message="Xid 79 on GPU-0: cordoned",
        type="Warning",
        source=client.V1EventSource(component="xidpipe-worker"),
        first_timestamp=stamp,
        last_timestamp=stamp,
        count=1,
    )

    created = worker_core.create_namespaced_event("default", event)
    repeated = worker_core.patch_namespaced_event(created.metadata.name, "default", {"count": 2})

    assert created.involved_object.name == name
    assert repeated.count == 2


def test_events_k8s_io_event_on_node(worker_client: client.ApiClient, node: client.V1Node) -> None:
    events = client.EventsV1Api(worker_client)
    name = node.metadata.name
    event = client.EventsV1Event(
        metadata=client.V1ObjectMeta(name=unique(f"{name}.gpu-fault"), namespace="default"),
        event_time=now(),
        reporting_controller="xidpipe.io/worker",
        reporting_instance="xidpipe-worker-0",
        action="Cordon",
        reason="GPUFault",
        type="Warning",
        note="Xid 79 on GPU-0: cordoned",
        regarding=client.V1ObjectReference(kind="Node", name=name, uid=name, api_version="v1"),
    )

    created = events.create_namespaced_event("default", event)
    # A repeat updates the series; note, reason and action are immutable once created.
    repeated = events.patch_namespaced_event(
        created.metadata.name,
        "default",
        {"series": {"count": 2, "lastObservedTime": now().isoformat()}},
        _content_type="application/merge-patch+json",
    )

    assert created.regarding.name == name
    assert repeated.series.count == 2


def test_list_pods_on_node_by_field_selector(
    worker_core: client.CoreV1Api, node: client.V1Node, make_pod: PodFactory
) -> None:
    on_node = {make_pod(node.metadata.name).metadata.name for _ in range(2)}
    make_pod("some-other-node")

    pods = worker_core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.metadata.name}")

    assert {p.metadata.name for p in pods.items} == on_node


def test_evict_pod(worker_core: client.CoreV1Api, node: client.V1Node, make_pod: PodFactory) -> None:
    pod = make_pod(node.metadata.name, running=True)
    name, namespace = pod.metadata.name, pod.metadata.namespace

    worker_core.create_namespaced_pod_eviction(
        name,
        namespace,
        client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(grace_period_seconds=0),
        ),
    )

    # Only a kubelet finalises a graceful delete of a bound pod; with grace 0 it goes at once,
    # otherwise it is at least marked for deletion.
    try:
        remaining = worker_core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        assert exc.status == 404
    else:
        assert remaining.metadata.deletion_timestamp is not None
