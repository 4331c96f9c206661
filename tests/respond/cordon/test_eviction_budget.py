"""Eviction honours PodDisruptionBudgets: a budget that allows no disruption answers 429."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kube import PodFactory, unique


def evict(core: client.CoreV1Api, pod: client.V1Pod) -> None:
    name, namespace = pod.metadata.name, pod.metadata.namespace
    core.create_namespaced_pod_eviction(
        name, namespace, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    )


def play_disruption_controller(
    policy: client.PolicyV1Api, pdb: client.V1PodDisruptionBudget, disruptions_allowed: int
) -> None:
    """No kube-controller-manager runs, so admin writes the status the disruption controller would."""
    current = policy.read_namespaced_pod_disruption_budget(pdb.metadata.name, pdb.metadata.namespace)
    policy.patch_namespaced_pod_disruption_budget_status(
        pdb.metadata.name,
        pdb.metadata.namespace,
        {
            "status": {
                "observedGeneration": current.metadata.generation,
                "disruptionsAllowed": disruptions_allowed,
                "currentHealthy": 1,
                "desiredHealthy": 1 - disruptions_allowed,
                "expectedPods": 1,
            }
        },
        _content_type="application/merge-patch+json",
    )


def test_eviction_blocked_by_budget_is_429_then_allowed_when_budget_permits(
    admin_client: client.ApiClient,
    worker_client: client.ApiClient,
    worker_core: client.CoreV1Api,
    node: client.V1Node,
    namespace: str,
    make_pod: PodFactory,
) -> None:
    labels = {"app": unique("trainer")}
    pod = make_pod(node.metadata.name, labels=labels, running=True)
    admin_policy = client.PolicyV1Api(admin_client)
    pdb = admin_policy.create_namespaced_pod_disruption_budget(
        namespace,
        client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name="trainer"),
            spec=client.V1PodDisruptionBudgetSpec(
                min_available=1, selector=client.V1LabelSelector(match_labels=labels)
            ),
        ),
    )
    play_disruption_controller(admin_policy, pdb, disruptions_allowed=0)

    # The worker may read the budget that blocks it (to say why in the incident).
    budgets = client.PolicyV1Api(worker_client).list_namespaced_pod_disruption_budget(namespace)
    assert [b.metadata.name for b in budgets.items] == ["trainer"]

    with pytest.raises(ApiException) as refused:
        evict(worker_core, pod)
    assert refused.value.status == 429
    assert "disruption budget" in (refused.value.body or "")
    assert worker_core.read_namespaced_pod(pod.metadata.name, namespace).metadata.deletion_timestamp is None

    play_disruption_controller(admin_policy, pdb, disruptions_allowed=1)
    evict(worker_core, pod)
    try:
        after = worker_core.read_namespaced_pod(pod.metadata.name, namespace)
    except ApiException as exc:
        assert exc.status == 404
    else:
        assert after.metadata.deletion_timestamp is not None
