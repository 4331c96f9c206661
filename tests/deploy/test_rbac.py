"""The chart's RBAC (deploy/helm/xidpipe) grants the worker exactly its actions; everything else is refused (403)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from tests.kube import PodFactory, make_configuration, status_of, unique

WORKER_USER = "system:serviceaccount:xidpipe:xidpipe-worker"


def test_worker_cannot_delete_a_node(worker_core: client.CoreV1Api, node: client.V1Node) -> None:
    assert status_of(lambda: worker_core.delete_node(node.metadata.name)) == 403


def test_worker_cannot_read_a_secret(
    worker_core: client.CoreV1Api, admin_core: client.CoreV1Api, namespace: str
) -> None:
    secret = admin_core.create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="registry-login"), string_data={"k": "v"}),
    )

    assert status_of(lambda: worker_core.read_namespaced_secret(secret.metadata.name, namespace)) == 403
    assert status_of(lambda: worker_core.list_secret_for_all_namespaces()) == 403


def test_worker_cannot_patch_a_pod(worker_core: client.CoreV1Api, node: client.V1Node, make_pod: PodFactory) -> None:
    pod = make_pod(node.metadata.name)
    patch = {"metadata": {"labels": {"hijacked": "true"}}}

    status = status_of(lambda: worker_core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace, patch))

    assert status == 403


def test_worker_cannot_delete_a_pod_bypassing_eviction(
    worker_core: client.CoreV1Api, node: client.V1Node, make_pod: PodFactory
) -> None:
    pod = make_pod(node.metadata.name)

    assert status_of(lambda: worker_core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace)) == 403


def nobody_calls(
    core: client.CoreV1Api, api_client: client.ApiClient, node: str, pod: client.V1Pod
) -> dict[str, Callable[[], object]]:
    ns, pod_name = pod.metadata.namespace, pod.metadata.name
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=unique("evt"), namespace="default"),
        involved_object=client.V1ObjectReference(kind="Node", name=node),
        reason="GPUFault",
        message="x",
    )
    return {
        "get node": lambda: core.read_node(node),
        "list nodes": lambda: core.list_node(),
        "cordon node": lambda: core.patch_node(node, {"spec": {"unschedulable": True}}),
        "patch node status": lambda: core.patch_node_status(
            node, {"status": {"conditions": [{"type": "GPUHealthy", "status": "False"}]}}
        ),
        "delete node": lambda: core.delete_node(node),
        "list pods": lambda: core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}"),
        "get pod": lambda: core.read_namespaced_pod(pod_name, ns),
        "evict pod": lambda: core.create_namespaced_pod_eviction(
            pod_name, ns, client.V1Eviction(metadata=client.V1ObjectMeta(name=pod_name, namespace=ns))
        ),
        "create core event": lambda: core.create_namespaced_event("default", event),
        "list pdbs": lambda: client.PolicyV1Api(api_client).list_pod_disruption_budget_for_all_namespaces(),
        "list secrets": lambda: core.list_namespaced_secret(ns),
        "list namespaces": lambda: core.list_namespace(),
    }


def test_nobody_is_refused_everything(
    nobody_core: client.CoreV1Api, nobody_client: client.ApiClient, node: client.V1Node, make_pod: PodFactory
) -> None:
    pod = make_pod(node.metadata.name, running=True)
    calls = nobody_calls(nobody_core, nobody_client, node.metadata.name, pod)

    statuses = {what: status_of(call) for what, call in calls.items()}

    assert statuses == dict.fromkeys(calls, 403)


@pytest.mark.parametrize(
    ("verb", "group", "resource", "subresource", "allowed"),
    [
        ("patch", "", "nodes", "", True),
        ("watch", "", "nodes", "", True),
        ("patch", "", "nodes", "status", True),
        ("create", "", "pods", "eviction", True),
        ("list", "policy", "poddisruptionbudgets", "", True),
        ("create", "events.k8s.io", "events", "", True),
        ("patch", "", "events", "", True),
        ("list", "", "events", "", True),
        ("get", "", "pods", "log", False),  # opt-in per namespace: respond.podLogsNamespaces
        ("get", "", "namespaces", "", True),
        ("update", "", "namespaces", "", False),
        ("update", "", "nodes", "", False),
        ("delete", "", "nodes", "", False),
        ("create", "", "nodes", "", False),
        ("update", "", "nodes", "status", False),
        ("delete", "", "pods", "", False),
        ("create", "", "pods", "", False),
        ("get", "", "secrets", "", False),
        ("get", "", "configmaps", "", False),
        ("delete", "", "events", "", False),
        ("create", "policy", "poddisruptionbudgets", "", False),
        ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", False),
    ],
)
def test_worker_permissions_by_access_review(
    admin_client: client.ApiClient,
    rbac_applied: object,
    verb: str,
    group: str,
    resource: str,
    subresource: str,
    allowed: bool,
) -> None:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=WORKER_USER,
            groups=["system:serviceaccounts", "system:serviceaccounts:xidpipe", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, group=group, resource=resource, subresource=subresource, namespace="workload"
            ),
        )
    )

    result = client.AuthorizationV1Api(admin_client).create_subject_access_review(review)

    assert result.status.allowed is allowed, result.status.reason


def test_real_service_account_token_gets_the_same_rights(
    admin_core: client.CoreV1Api, control_plane: object, rbac_applied: object, node: client.V1Node
) -> None:
    """A token minted by the TokenRequest API for the ServiceAccount of the chart is bound the same
    way as the static test identity."""
    token = admin_core.create_namespaced_service_account_token(
        "xidpipe-worker",
        "xidpipe",
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)),
    ).status.token
    config = make_configuration(control_plane, "nobody")
    config.api_key = {"BearerToken": token}

    with client.ApiClient(config) as api_client:
        core = client.CoreV1Api(api_client)
        review = client.AuthenticationV1Api(api_client).create_self_subject_review(client.V1SelfSubjectReview())
        assert review.status.user_info.username == WORKER_USER
        assert core.patch_node(node.metadata.name, {"spec": {"unschedulable": True}}).spec.unschedulable
        assert status_of(lambda: core.delete_node(node.metadata.name)) == 403
