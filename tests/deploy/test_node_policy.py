"""The chart's node-patch admission policy (templates/node-policy.yaml) on the real kube-apiserver:
the responder's node patches may change spec.unschedulable, the xidpipe.io/gpu-fault taint,
xidpipe.io/ annotations and the GPUHealthy condition, and nothing else; `respond.podLogsNamespaces`
opens container logs one namespace at a time."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import create_from_dict

from tests.kube import PodFactory, chart_rbac
from tests.polling import poll

POLICY = "xidpipe-worker-node-changes"


def refusal(call: Callable[[], object]) -> str | None:
    """The admission policy's message when it refused `call`, None when the call went through."""
    try:
        call()
    except ApiException as exc:
        assert exc.status in (403, 422) and POLICY in (exc.body or ""), (exc.status, exc.body)
        return str(exc.body)
    return None


@pytest.fixture
def policed(worker_core: client.CoreV1Api, node: client.V1Node) -> client.CoreV1Api:
    """The worker's client once the policy is in force (policies load asynchronously)."""
    name = node.metadata.name
    def in_force() -> bool:
        if refusal(lambda: worker_core.patch_node(name, {"metadata": {"labels": {"probe": "x"}}})) is not None:
            return True
        worker_core.patch_node(name, {"metadata": {"labels": {"probe": None}}})
        return False

    poll("the admission policy to take effect", in_force, 30, interval=0.2)
    return worker_core


def test_the_worker_cannot_change_a_label(policed: client.CoreV1Api, node: client.V1Node,
                                          admin_core: client.CoreV1Api) -> None:
    name = node.metadata.name
    assert "labels" in (refusal(lambda: policed.patch_node(name, {"metadata": {"labels": {"x": "y"}}})) or "")
    assert refusal(lambda: policed.patch_node(name, {"metadata": {"labels": {"nvidia.com/gpu.present": None}}}))
    assert admin_core.patch_node(name, {"metadata": {"labels": {"x": "y"}}}).metadata.labels["x"] == "y"


def test_the_worker_cannot_add_or_remove_another_taint(policed: client.CoreV1Api, node: client.V1Node) -> None:
    name = node.metadata.name
    current = [{"key": t.key, "value": t.value, "effect": t.effect} for t in policed.read_node(name).spec.taints]
    ours = {"key": "xidpipe.io/gpu-fault", "value": "gpu_lost", "effect": "NoSchedule"}
    added = {"key": "example.com/evil", "effect": "NoExecute"}
    assert "taint" in (refusal(lambda: policed.patch_node(name, {"spec": {"taints": [*current, added]}})) or "")
    assert refusal(lambda: policed.patch_node(name, {"spec": {"taints": [ours]}}))  # drops the other owner's
    assert refusal(lambda: policed.patch_node(name, {"spec": {"taints": []}}))


def test_the_worker_cannot_change_other_annotations_conditions_or_fields(policed: client.CoreV1Api,
                                                                         node: client.V1Node) -> None:
    name = node.metadata.name
    assert refusal(lambda: policed.patch_node(name, {"metadata": {"annotations": {"example.com/owner": "me"}}}))
    assert refusal(lambda: policed.patch_node(name, {"spec": {"providerID": "aws:///evil"}}))
    assert refusal(lambda: policed.patch_node(name, {"metadata": {"finalizers": ["example.com/hold"]}}))
    assert refusal(lambda: policed.patch_node_status(
        name, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}))
    assert refusal(lambda: policed.patch_node_status(name, {"status": {"capacity": {"nvidia.com/gpu": "0"}}}))


def test_the_cordon_still_goes_through(policed: client.CoreV1Api, node: client.V1Node) -> None:
    name = node.metadata.name
    current = [{"key": t.key, "value": t.value, "effect": t.effect} for t in policed.read_node(name).spec.taints]
    ours = {"key": "xidpipe.io/gpu-fault", "value": "gpu_lost", "effect": "NoSchedule"}
    done = policed.patch_node(name, {
        "metadata": {"annotations": {"xidpipe.io/cordoned-at": "2026-12-01T00:00:00Z", "xidpipe.io/incident": "i"}},
        "spec": {"unschedulable": True, "taints": [*current, ours]},
    })
    assert done.spec.unschedulable and [t.key for t in done.spec.taints] == [t["key"] for t in [*current, ours]]
    status = policed.patch_node_status(name, {"status": {"conditions": [
        {"type": "GPUHealthy", "status": "False", "reason": "GpuLost", "message": "Xid 79"}]}})
    assert [c.type for c in status.status.conditions] == ["GPUHealthy"]
    released = policed.patch_node(name, {"metadata": {"annotations": {"xidpipe.io/cordoned-at": None}},
                                         "spec": {"unschedulable": False, "taints": current}})
    assert not released.spec.unschedulable and "xidpipe.io/cordoned-at" not in (released.metadata.annotations or {})


def test_container_logs_are_readable_only_in_a_namespace_that_opted_in(
    admin_client: client.ApiClient, rbac_applied: object, namespace: str, node: client.V1Node,
    make_pod: PodFactory,
) -> None:
    auth = client.AuthorizationV1Api(admin_client)

    def may_read_logs(ns: str) -> bool:
        review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user="system:serviceaccount:xidpipe:xidpipe-worker",
            groups=["system:serviceaccounts", "system:serviceaccounts:xidpipe", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(verb="get", resource="pods", subresource="log",
                                                            namespace=ns)))
        return bool(auth.create_subject_access_review(review).status.allowed)

    assert not may_read_logs(namespace) and not may_read_logs("kube-system")
    opted_in = [d for d in chart_rbac(f"respond.podLogsNamespaces={{{namespace}}}")
                if d["metadata"].get("namespace") == namespace]
    assert {d["kind"] for d in opted_in} == {"Role", "RoleBinding"}
    for doc in opted_in:
        create_from_dict(admin_client, doc)
    assert may_read_logs(namespace) and not may_read_logs("kube-system")
