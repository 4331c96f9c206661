"""Draining the pods on the faulty GPU: Eviction API, PodDisruptionBudgets honoured, against the real
kube-apiserver (admin plays the kubelet and the disruption controller)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.cordon import PodRef
from models.cordon_policy import CordonPolicy, Drain
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon.steps.drain import DrainReport, drain_gpu_pods
from tests.kube import PodFactory, unique
from tests.respond.cordon.conftest import ExecutorFactory, NodeFactory, xid79


def budget(admin_client: client.ApiClient, namespace: str, labels: dict[str, str], allowed: int) -> None:
    """A PDB (minAvailable 1) whose status the disruption controller would have written."""
    policy = client.PolicyV1Api(admin_client)
    pdb = policy.create_namespaced_pod_disruption_budget(namespace, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name=unique("pdb")),
        spec=client.V1PodDisruptionBudgetSpec(min_available=1, selector=client.V1LabelSelector(match_labels=labels)),
    ))
    set_allowed(admin_client, pdb, allowed)


def set_allowed(admin_client: client.ApiClient, pdb: client.V1PodDisruptionBudget, allowed: int) -> None:
    policy = client.PolicyV1Api(admin_client)
    current = policy.read_namespaced_pod_disruption_budget(pdb.metadata.name, pdb.metadata.namespace)
    policy.patch_namespaced_pod_disruption_budget_status(
        pdb.metadata.name, pdb.metadata.namespace,
        {"status": {"observedGeneration": current.metadata.generation, "disruptionsAllowed": allowed,
                    "currentHealthy": 1, "desiredHealthy": 1 - allowed, "expectedPods": 1}},
        _content_type="application/merge-patch+json",
    )


def ref(pod: client.V1Pod) -> PodRef:
    return PodRef(namespace=pod.metadata.namespace, name=pod.metadata.name)


def pods_of(api: client.ApiClient) -> KubeNodes:
    return KubeNodes(api, reporting_instance="xidpipe-test")


def deletion_requested(core: client.CoreV1Api, pod: client.V1Pod) -> bool:
    try:
        return core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace).metadata.deletion_timestamp \
            is not None
    except ApiException as exc:
        assert exc.status == 404
        return True


def test_eviction_blocked_by_a_budget_backs_off_reports_and_never_violates_it(
    admin_client: client.ApiClient, admin_core: client.CoreV1Api, make_node: NodeFactory, make_pod: PodFactory,
    namespace: str, make_executor: ExecutorFactory, action_log: Path,
) -> None:
    node = make_node(pool=unique("pool"))
    guarded_labels = {"app": unique("trainer")}
    guarded = make_pod(node, labels=guarded_labels, running=True)
    free = make_pod(node, labels={"app": unique("free")}, running=True)
    bystander = make_pod(node, labels={"app": unique("other-gpu")}, running=True)  # not on the faulty GPU
    budget(admin_client, namespace, guarded_labels, allowed=0)
    policy = CordonPolicy(drain=Drain(enabled=True, deadline_s=1.5, backoff_initial_s=0.1, backoff_max_s=0.4,
                                      grace_period_s=0))

    started = time.monotonic()
    result = make_executor(policy).handle(xid79(node, pods=(ref(guarded), ref(free))))
    elapsed = time.monotonic() - started

    drained = result.step("evict")
    assert result.outcome == "done" and drained is not None
    report = DrainReport.model_validate(drained.details)
    key = f"{namespace}/{guarded.metadata.name}"
    assert report.evicted == [f"{namespace}/{free.metadata.name}"]
    assert list(report.blocked) == [key] and "disruption budget" in report.blocked[key]
    assert report.attempts >= 4  # retried with backoff until the deadline
    assert 1.0 <= elapsed < 10
    assert not deletion_requested(admin_core, guarded)  # the budget held
    assert deletion_requested(admin_core, free)
    assert not deletion_requested(admin_core, bystander)
    evict = [json.loads(line) for line in action_log.read_text().splitlines() if '"evict"' in line]
    assert evict[0]["outcome"] == "blocked" and key in evict[0]["reason"]


def test_blocked_eviction_succeeds_once_the_budget_allows_it(
    admin_client: client.ApiClient, admin_core: client.CoreV1Api, worker_client: client.ApiClient,
    make_node: NodeFactory, make_pod: PodFactory, namespace: str,
) -> None:
    node = make_node(pool=unique("pool"))
    labels = {"app": unique("trainer")}
    pod = make_pod(node, labels=labels, running=True)
    budget(admin_client, namespace, labels, allowed=0)
    pdb = client.PolicyV1Api(admin_client).list_namespaced_pod_disruption_budget(namespace).items[0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:  # the disruption controller frees a slot while we wait
        slept.append(seconds)
        if len(slept) == 2:
            set_allowed(admin_client, pdb, 1)
        time.sleep(seconds)

    report = drain_gpu_pods(pods_of(worker_client), node, (ref(pod),),
                            Drain(enabled=True, deadline_s=20, backoff_initial_s=0.1, grace_period_s=0), sleep=sleep)

    assert report.evicted == [f"{namespace}/{pod.metadata.name}"] and report.complete
    assert slept == [0.1, 0.2]  # exponential backoff
    assert deletion_requested(admin_core, pod)


def test_daemonset_pods_and_pods_on_other_nodes_are_skipped(
    admin_core: client.CoreV1Api, worker_client: client.ApiClient, make_node: NodeFactory, make_pod: PodFactory,
    namespace: str,
) -> None:
    node = make_node(pool=unique("pool"))
    elsewhere = make_pod("some-other-node", running=True)
    owner = client.V1OwnerReference(api_version="apps/v1", kind="DaemonSet", name="dcgm-exporter",
                                    uid="0b6d0c6e-0000-4000-8000-000000000001")
    daemon = admin_core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=unique("dcgm-exporter"), owner_references=[owner]),
        spec=client.V1PodSpec(node_name=node, automount_service_account_token=False,
                              containers=[client.V1Container(name="main", image="registry.example/dcgm:1")]),
    ))

    named = (ref(daemon), ref(elsewhere), PodRef(namespace=namespace, name="gone"))
    report = drain_gpu_pods(pods_of(worker_client), node, named, Drain(enabled=True, deadline_s=2))

    assert report.skipped == {f"{namespace}/{daemon.metadata.name}": "DaemonSet pod",
                              f"{namespace}/{elsewhere.metadata.name}": f"not on node {node}"}
    assert report.gone == [f"{namespace}/gone"] and report.evicted == []
    assert not deletion_requested(admin_core, daemon)


def test_unattributed_incident_evicts_only_gpu_requesting_pods_when_asked(
    admin_core: client.CoreV1Api, worker_client: client.ApiClient, make_node: NodeFactory, namespace: str,
) -> None:
    node = make_node(pool=unique("pool"))

    def pod(gpus: int) -> client.V1Pod:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else None
        return admin_core.create_namespaced_pod(namespace, client.V1Pod(
            metadata=client.V1ObjectMeta(name=unique("job")),
            spec=client.V1PodSpec(node_name=node, automount_service_account_token=False, containers=[
                client.V1Container(name="main", image="registry.example/job:1",
                                   resources=client.V1ResourceRequirements(limits=limits))]),
        ))

    gpu_pod, cpu_pod = pod(1), pod(0)
    off = drain_gpu_pods(pods_of(worker_client), node, (), Drain(enabled=True, deadline_s=2))
    on = drain_gpu_pods(pods_of(worker_client), node, (),
                        Drain(enabled=True, deadline_s=2, unattributed="gpu_requesting", grace_period_s=0))

    assert off.evicted == [] and off.complete
    assert on.evicted == [f"{namespace}/{gpu_pod.metadata.name}"]
    assert deletion_requested(admin_core, gpu_pod) and not deletion_requested(admin_core, cpu_pod)
