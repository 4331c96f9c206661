"""The test cluster (tests/cluster.py) schedules, runs and evicts as Kubernetes does: a GPU pod is
placed by its extended resource and run to its end by KWOK, the Job controller completes a Job, the
disruption controller's budget refuses and then allows an eviction, KWOK's reboot stage changes a
node's boot ID. Each test builds its own nodes and labels its pods to them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster import GPU_RESOURCE, kwok_pod, node_ready, pod_phase, reboot_node, wait_for
from tests.kube import status_of, unique

pytestmark = pytest.mark.k8s


def only_on(test_label: str) -> dict[str, str]:
    return {"xidpipe.io/test-run": test_label}


def test_the_cluster_runs_kubernetes_1_37_with_device_taint_rules_served(
        cluster_admin_client: client.ApiClient) -> None:
    version = client.VersionApi(cluster_admin_client).get_code()
    assert (version.git_version, version.minor) == ("v1.37.2", "37")
    # resource.k8s.io/v1 DeviceTaintRule is on by 1.37's defaults (no feature gate is set).
    rules = client.ResourceV1Api(cluster_admin_client).list_device_taint_rule()
    assert rules.items is not None


def test_a_gpu_pod_is_scheduled_where_its_gpus_are_and_runs_to_success(
        cluster_core: client.CoreV1Api, cluster_namespace: str, kwok_node) -> None:
    run = unique("run")
    cpu_only = kwok_node(labels=only_on(run), gpus=0)
    gpu = kwok_node(labels=only_on(run), gpus=8)
    assert gpu.status.allocatable[GPU_RESOURCE] == "8" and cpu_only.status.allocatable[GPU_RESOURCE] == "0"
    pod = kwok_pod(unique("trainer"), gpus=8, outcome="Succeeded", runtime="2s")
    pod.spec.node_selector = only_on(run)
    cluster_core.create_namespaced_pod(cluster_namespace, pod)

    running = wait_for(lambda: pod_phase(cluster_core, cluster_namespace, pod.metadata.name, {"Running"}),
                       "the pod to run")
    assert running.spec.node_name == gpu.metadata.name  # the scheduler placed it by its 8 GPUs
    assert running.status.container_statuses[0].state.running is not None
    done = wait_for(lambda: pod_phase(cluster_core, cluster_namespace, pod.metadata.name, {"Succeeded", "Failed"}),
                    "the pod to end")
    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].state.terminated.exit_code == 0


def test_a_pod_given_the_failed_outcome_fails_with_its_exit_code(
        cluster_core: client.CoreV1Api, cluster_namespace: str, kwok_node) -> None:
    run = unique("run")
    kwok_node(labels=only_on(run))
    pod = kwok_pod(unique("trainer"), outcome="Failed", exit_code=3, runtime="500ms")
    pod.spec.node_selector = only_on(run)
    cluster_core.create_namespaced_pod(cluster_namespace, pod)
    done = wait_for(lambda: pod_phase(cluster_core, cluster_namespace, pod.metadata.name, {"Succeeded", "Failed"}),
                    "the pod to end")
    assert done.status.phase == "Failed"
    assert done.status.container_statuses[0].state.terminated.exit_code == 3


def test_the_job_controller_creates_the_jobs_pod_and_completes_the_job(
        cluster_admin_client: client.ApiClient, cluster_core: client.CoreV1Api, cluster_namespace: str,
        kwok_node) -> None:
    run = unique("run")
    node = kwok_node(labels=only_on(run))
    batch = client.BatchV1Api(cluster_admin_client)
    template = kwok_pod("unused", gpus=1)
    template.metadata.name = None
    template.spec.node_selector = only_on(run)
    job = batch.create_namespaced_job(cluster_namespace, client.V1Job(
        metadata=client.V1ObjectMeta(name=unique("gpu-reset")),
        spec=client.V1JobSpec(backoff_limit=0, template=client.V1PodTemplateSpec(
            metadata=template.metadata, spec=template.spec)),
    ))

    def complete() -> client.V1Job | None:
        current = batch.read_namespaced_job(job.metadata.name, cluster_namespace)
        conditions = {c.type: c.status for c in current.status.conditions or []}
        return current if conditions.get("Complete") == "True" else None

    done = wait_for(complete, "the Job to complete")
    assert done.status.succeeded == 1 and not done.status.failed
    [pod] = cluster_core.list_namespaced_pod(cluster_namespace, label_selector=f"job-name={job.metadata.name}").items
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Job", job.metadata.name, True)
    assert pod.spec.node_name == node.metadata.name and pod.status.phase == "Succeeded"


def test_an_eviction_is_refused_while_the_budget_allows_none_and_done_once_it_allows_one(
        cluster_admin_client: client.ApiClient, cluster_core: client.CoreV1Api, cluster_namespace: str,
        kwok_node) -> None:
    run = unique("run")
    kwok_node(labels=only_on(run))
    policy = client.PolicyV1Api(cluster_admin_client)
    app = {"app": unique("trainer")}
    policy.create_namespaced_pod_disruption_budget(cluster_namespace, client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name="trainer"),
        spec=client.V1PodDisruptionBudgetSpec(min_available=1, selector=client.V1LabelSelector(match_labels=app)),
    ))

    def start_pod() -> str:
        pod = kwok_pod(unique("trainer"), labels=app)
        pod.spec.node_selector = only_on(run)
        name = cluster_core.create_namespaced_pod(cluster_namespace, pod).metadata.name
        wait_for(lambda: pod_phase(cluster_core, cluster_namespace, name, {"Running"}), f"pod {name} to run")
        return str(name)

    def budget(healthy: int, allowed: int) -> client.V1PodDisruptionBudget | None:
        pdb = policy.read_namespaced_pod_disruption_budget("trainer", cluster_namespace)
        status = pdb.status
        return pdb if status and (status.current_healthy, status.disruptions_allowed) == (healthy, allowed) else None

    def evict(name: str) -> int:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=cluster_namespace))
        return status_of(lambda: cluster_core.create_namespaced_pod_eviction(name, cluster_namespace, body))

    first = start_pod()
    wait_for(lambda: budget(healthy=1, allowed=0), "the disruption controller to count one healthy pod")
    assert evict(first) == 429

    start_pod()
    wait_for(lambda: budget(healthy=2, allowed=1), "the budget to allow one disruption")
    assert evict(first) == 200
    # KWOK removes the evicted pod once its grace period (1 s) is over, as a kubelet would.
    wait_for(lambda: status_of(lambda: cluster_core.read_namespaced_pod(first, cluster_namespace)) == 404,
             "the evicted pod to be gone")
    wait_for(lambda: budget(healthy=1, allowed=0), "the budget to allow none again")


def test_a_reboot_gives_the_node_a_new_boot_id_and_it_comes_back_ready(
        cluster_core: client.CoreV1Api, kwok_node) -> None:
    node = kwok_node()
    name, before = node.metadata.name, node.status.node_info.boot_id
    asked = datetime.now(UTC).replace(microsecond=0)
    after = reboot_node(cluster_core, name)

    assert after != before
    rebooted = cluster_core.read_node(name)
    assert rebooted.status.node_info.boot_id == after and node_ready(rebooted)
    # It went NotReady and came back: the Ready condition changed after the reboot was asked for.
    ready = next(c for c in rebooted.status.conditions if c.type == "Ready")
    assert ready.last_transition_time >= asked - timedelta(seconds=1)
    assert rebooted.status.capacity[GPU_RESOURCE] == "8"  # what it registered with is kept


def test_nodes_without_the_kwok_annotation_and_their_pods_are_left_alone(
        cluster_core: client.CoreV1Api, cluster_namespace: str, kwok_node) -> None:
    managed = kwok_node()
    plain = unique("plain-node")
    cluster_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=plain)))
    try:
        left = cluster_core.create_namespaced_pod(cluster_namespace, kwok_pod(unique("left"), node_name=plain))
        run = cluster_core.create_namespaced_pod(cluster_namespace,
                                                 kwok_pod(unique("run"), node_name=managed.metadata.name))
        wait_for(lambda: pod_phase(cluster_core, cluster_namespace, run.metadata.name, {"Running"}),
                 "the pod on the KWOK node to run")
        assert cluster_core.read_namespaced_pod(left.metadata.name, cluster_namespace).status.phase == "Pending"
        assert not node_ready(cluster_core.read_node(plain))
    finally:
        try:
            cluster_core.delete_node(plain)
        except ApiException as exc:
            assert exc.status == 404


def test_the_worker_has_the_charts_rights_on_the_cluster(cluster_worker_client: client.ApiClient, kwok_node) -> None:
    name = kwok_node().metadata.name
    worker = client.CoreV1Api(cluster_worker_client)
    assert status_of(lambda: worker.patch_node(name, {"spec": {"unschedulable": True}})) == 200
    assert worker.read_node(name).spec.unschedulable is True
    assert status_of(lambda: worker.delete_node(name)) == 403
