"""The chart's node-patch admission policy (templates/node-policy.yaml) on the real kube-apiserver:
the responder's node patches may change spec.unschedulable, the xidpipe.io/gpu-fault taint,
xidpipe.io/ annotations and the GPUHealthy condition, and nothing else: every other field of the
node's metadata, spec and status, one patch each, and a check that the table names every field the
API server's schema has; `respond.podLogsNamespaces` opens container logs one namespace at a time."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import create_from_dict

from tests.kube import PodFactory, chart_rbac, unique
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


NODE_INFO = {"machineID": "m-1", "systemUUID": "s-1", "bootID": "b-1", "kernelVersion": "6.8.0", "osImage": "Ubuntu",
             "containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
             "operatingSystem": "linux", "architecture": "amd64"}
# One change per field the responder has no business changing: (where, field, the patched value).
OTHER_FIELDS: list[tuple[str, str, Any]] = [
    ("metadata", "labels", {"example.com/team": "evil"}),
    ("metadata", "finalizers", ["example.com/hold"]),
    ("metadata", "ownerReferences", [{"apiVersion": "v1", "kind": "Namespace", "name": "default",
                                      "uid": "0b6e8c6e-0000-4000-8000-000000000000"}]),
    ("metadata", "generateName", "evil-"),
    ("spec", "podCIDR", "10.9.0.0/24"),
    ("spec", "podCIDRs", ["10.9.0.0/24"]),
    ("spec", "providerID", "aws:///evil"),
    ("spec", "externalID", "evil"),
    ("spec", "configSource", {"configMap": {"name": "evil", "namespace": "kube-system",
                                            "kubeletConfigKey": "kubelet"}}),
    ("spec", "podPreemptionPolicy", {"disableResizePreemption": ["evil"]}),
    ("status", "addresses", [{"type": "InternalIP", "address": "10.6.6.6"}]),
    ("status", "allocatable", {"nvidia.com/gpu": "0"}),
    ("status", "capacity", {"nvidia.com/gpu": "0"}),
    ("status", "config", {"error": "evil"}),
    ("status", "daemonEndpoints", {"kubeletEndpoint": {"Port": 6666}}),
    ("status", "declaredFeatures", ["Evil"]),
    ("status", "features", {"supplementalGroupsPolicy": True}),
    ("status", "images", [{"names": ["registry.example/evil:1"], "sizeBytes": 1}]),
    ("status", "nodeInfo", {**NODE_INFO, "kubeletVersion": "v0.0.0-evil"}),
    ("status", "phase", "Terminated"),
    ("status", "runtimeHandlers", [{"name": "evil"}]),
    ("status", "volumesAttached", [{"name": "kubernetes.io/csi/evil^vol", "devicePath": "/dev/evil"}]),
    ("status", "volumesInUse", ["kubernetes.io/csi/evil^vol"]),
]
# What the responder may change (its steps need it), and what only the API server writes or never changes.
ALLOWED = {("metadata", "annotations"), ("spec", "unschedulable"), ("spec", "taints"), ("status", "conditions")}
SERVER_KEPT = {("metadata", f) for f in ("name", "namespace", "uid", "resourceVersion", "generation", "selfLink",
                                         "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                                         "managedFields")}
SCHEMAS = {"metadata": "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "spec": "io.k8s.api.core.v1.NodeSpec",
           "status": "io.k8s.api.core.v1.NodeStatus"}


@pytest.fixture
def kubelet_node(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A node with a status as a kubelet reports it (node info, capacity, a Ready condition)."""
    name = unique("gpu-node")
    admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels={"nvidia.com/gpu.present": "true"}, annotations={"example.com/owner": "infra"})))
    admin_core.patch_node_status(name, {"status": {
        "nodeInfo": NODE_INFO, "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
        "phase": "Running", "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}})
    yield name
    admin_core.delete_node(name)


def field_of(core: client.CoreV1Api, name: str, where: str, field: str) -> Any:
    return core.api_client.sanitize_for_serialization(core.read_node(name)).get(where, {}).get(field)


def answer(call: Callable[[], object]) -> str | None:
    """The API server's refusal of `call` (its body), None when it went through."""
    try:
        call()
    except ApiException as exc:
        assert exc.status in (403, 422), (exc.status, exc.body)
        return str(exc.body)
    return None


@pytest.mark.parametrize(("where", "field", "value"), OTHER_FIELDS, ids=[f"{w}.{f}" for w, f, _ in OTHER_FIELDS])
def test_the_worker_cannot_change_any_other_field(policed: client.CoreV1Api, admin_core: client.CoreV1Api,
                                                  kubelet_node: str, where: str, field: str, value: Any) -> None:
    name = kubelet_node
    before = field_of(admin_core, name, where, field)
    patch = {where: {field: value}}

    def by(core: client.CoreV1Api) -> str | None:
        return answer(lambda: (core.patch_node_status if where == "status" else core.patch_node)(name, patch))

    refused = by(policed)
    assert field_of(admin_core, name, where, field) == before
    if refused is not None and POLICY in refused:
        assert f"{where}.{field}" in refused  # the refusal names the field
        return
    # Refused by the API server's own validation, or dropped by it (a removed or gated feature): the
    # same patch by admin changes nothing either. The policy pins the field where a server keeps it.
    by(admin_core)
    assert field_of(admin_core, name, where, field) == before, f"{where}.{field}: only the policy could keep it"


def test_every_field_of_a_node_is_pinned_or_allowed(admin_client: client.ApiClient) -> None:
    """The table above names every field the API server's schema gives a node: a field a new Kubernetes
    adds is pinned by the policy's catch-all rules, and must join the table to be tried."""
    method, url, headers, _, _ = admin_client.param_serialize("GET", "/openapi/v3/api/v1",
                                                              auth_settings=["BearerToken"])
    response = admin_client.call_api(method, url, headers)
    response.read()
    schemas = json.loads(response.data)["components"]["schemas"]
    known = {(w, f) for w, f, _ in OTHER_FIELDS} | ALLOWED | SERVER_KEPT
    fields = {(where, f) for where, schema in SCHEMAS.items() for f in schemas[schema]["properties"]}
    assert fields - known == set(), "fields not tried"
    assert known - fields == set(), "fields the schema does not have"


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
