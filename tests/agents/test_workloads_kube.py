"""The workloads sensor on a real kube-apiserver, as the agent's ServiceAccount with the chart's RBAC:
pods created with the owner references and labels each controller writes (a CronJob → Job → Pod
chain and a RayJob → RayCluster → Pod chain with real owners, the other shapes of
`tests/models/test_workloads.py`), a watch the server ends and that resumes, and a watch from a
resourceVersion the API server no longer has (after it restarted) that lists again."""

from __future__ import annotations

import base64
import copy
import json
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agents.metrics import Metrics
from agents.settings import AgentSettings
from agents.signals import SYSTEM_CLOCK, SensorContext
from agents.signals import workloads as workloads_spec
from agents.signals.workloads.sensor import WorkloadsSensor, WorkloadsSettings
from models.node_records import NodeRecordBase, PodWorkloads
from tests.kube import PodFactory, kubeconfig_for, load_controlplane, make_configuration, status_of, unique
from tests.models.test_workloads import POD
from tests.polling import poll

AGENT_NS, AGENT_SA = "xidpipe-agent", "xidpipe-agent"  # the chart's defaults (values.yaml: agent)
GPU = {"limits": {"nvidia.com/gpu": "1"}}


@pytest.fixture(scope="module")
def agent_kubeconfig(admin_client: client.ApiClient, rbac_applied: object, control_plane: Any,
                     tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig with a token of the agent's ServiceAccount, bound only by the chart's RBAC."""
    core = client.CoreV1Api(admin_client)
    for create in (lambda: core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=AGENT_NS))),
                   lambda: core.create_namespaced_service_account(
                       AGENT_NS, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=AGENT_SA)))):
        try:
            create()
        except ApiException as exc:
            if exc.status != 409:
                raise
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=3600))
    token = core.create_namespaced_service_account_token(AGENT_SA, AGENT_NS, request).status.token
    return kubeconfig_for(control_plane, str(token), tmp_path_factory.mktemp("agent") / "kubeconfig")


class Running:
    """A workloads sensor started in its thread, with what it published."""

    def __init__(self, node: str, settings: WorkloadsSettings) -> None:
        self.records: list[NodeRecordBase] = []
        self.metrics = Metrics()
        ctx = SensorContext(sensor="workloads", node=node, settings=settings, publish=self.records.append,
                            clock=SYSTEM_CLOCK, metrics=self.metrics)
        self.sensor = WorkloadsSensor(ctx)
        self.stop = threading.Event()
        self.sensor.start(self.stop)

    def last(self) -> PodWorkloads | None:
        found = [r for r in self.records if isinstance(r, PodWorkloads)]
        return found[-1] if found else None

    def keys(self) -> dict[str, str]:
        last = self.last()
        return {p.pod: p.workload.key for p in last.pods} if last else {}

    def wait_for(self, what: str, want: Callable[[dict[str, str]], bool], timeout: float = 30) -> dict[str, str]:
        poll(what, lambda: want(self.keys()), timeout, context=lambda: repr(self.keys()))
        return self.keys()

    def metric(self, name: str) -> float:
        return self.metrics.get(f"xidpipe_agent_workloads_{name}")

    def close(self) -> None:
        self.stop.set()
        self.sensor.close()


@pytest.fixture
def running() -> Iterator[Callable[[str, WorkloadsSettings], Running]]:
    started: list[Running] = []

    def start(node: str, settings: WorkloadsSettings) -> Running:
        started.append(Running(node, settings))
        return started[-1]

    yield start
    for r in started:
        r.close()


def gpu_pod(namespace: str, node: str, shape: str | dict[str, Any], name: str | None = None,
            gpu: bool = True) -> dict[str, Any]:
    """A pod of `shape` (a name of `POD`, or metadata) bound to `node`, asking for a GPU."""
    meta = copy.deepcopy(yaml.safe_load(POD[shape])["metadata"] if isinstance(shape, str) else shape)
    meta["namespace"] = namespace
    meta["name"] = name or meta["name"]
    meta.pop("finalizers", None)  # no Kueue runs to remove its finalizer
    resources = GPU if gpu else {"limits": {"cpu": "1"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "registry.example/trainer:1", "resources": resources}]}}


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    """An owner reference to `obj` as controllers write them."""
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def ray_crd(admin: client.ApiClient) -> None:
    """The RayCluster CRD (its schema left open), established."""
    ext = client.ApiextensionsV1Api(admin)
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "rayclusters.ray.io"},
           "spec": {"group": "ray.io", "scope": "Namespaced",
                    "names": {"plural": "rayclusters", "singular": "raycluster", "kind": "RayCluster"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established() -> bool:
        got = ext.read_custom_resource_definition("rayclusters.ray.io")
        return any(c.type == "Established" and c.status == "True" for c in (got.status.conditions or []))

    poll("the RayCluster CRD established", established, 30)


def test_each_pods_workload_from_the_api_server(admin_client: client.ApiClient, agent_kubeconfig: Path,
                                                node: client.V1Node, namespace: str,
                                                running: Callable[[str, WorkloadsSettings], Running]) -> None:
    core, batch = client.CoreV1Api(admin_client), client.BatchV1Api(admin_client)
    custom = client.CustomObjectsApi(admin_client)
    here, ns = node.metadata.name, namespace
    # A CronJob's Job, as the CronJob controller writes it, and its pod, as the Job controller does.
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "x"}]}}
    cron = batch.create_namespaced_cron_job(ns, {"apiVersion": "batch/v1", "kind": "CronJob",
                                                 "metadata": {"name": "nightly"},
                                                 "spec": {"schedule": "0 3 * * *",
                                                          "jobTemplate": {"spec": {"template": template}}}})
    cron_obj = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "uid": cron.metadata.uid}}
    job = batch.create_namespaced_job(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "nightly-29087640", "ownerReferences": [owner(cron_obj)]}, "spec": {"template": template}})
    job_obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": job.metadata.name,
                                                                     "uid": job.metadata.uid}}
    cron_pod = yaml.safe_load(POD["cronjob"])["metadata"]
    cron_pod["ownerReferences"] = [owner(job_obj)]
    # A RayJob's RayCluster (KubeRay sets the RayJob as its controller), and one of its worker pods.
    ray_crd(admin_client)
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rayjob-sample",
                                                                        "uid": str(uuid.uuid4())}}
    cluster = custom.create_namespaced_custom_object("ray.io", "v1", ns, "rayclusters", {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "raycluster-kuberay", "ownerReferences": [owner(rayjob)]}, "spec": {}})
    ray_pod = yaml.safe_load(POD["raycluster"])["metadata"]
    ray_pod["ownerReferences"] = [owner(cluster)]

    shapes = ["jobset", "indexed_job", "deployment", "statefulset", "lws_worker", "pytorchjob", "mpijob_launcher",
              "trainjob", "volcano", "kueue_pod_group", "plain"]
    bodies = [gpu_pod(ns, here, s) for s in shapes] + [gpu_pod(ns, here, cron_pod), gpu_pod(ns, here, ray_pod)]
    bodies.append(gpu_pod(ns, here, "plain", name="cpu-only", gpu=False))  # holds no GPU: not published
    bodies.append(gpu_pod(ns, "another-node", "plain", name="elsewhere"))  # another node's: never listed
    for body in bodies[:5]:
        core.create_namespaced_pod(ns, body)

    sensor = running(here, WorkloadsSettings(kube_config=str(agent_kubeconfig), watch_timeout_s=60))
    sensor.wait_for("the first five pods listed", lambda k: len(k) == 5)
    for body in bodies[5:]:  # the rest arrive through the watch
        core.create_namespaced_pod(ns, body)

    keys = sensor.wait_for("every GPU pod of the node", lambda k: len(k) == len(bodies) - 2)
    assert keys == {
        "trainer-workers-0-23-k9d2x": f"{ns}/JobSet/trainer",
        "job-3-x7k2p": f"{ns}/Job/job",
        "inference-7d4b9c8f6d-k2x9p": f"{ns}/Deployment/inference",
        "embeddings-2": f"{ns}/StatefulSet/embeddings",
        "vllm-0-3": f"{ns}/LeaderWorkerSet/vllm",
        "resnet-worker-3": f"{ns}/PyTorchJob/resnet",
        "bert-launcher-x7k2p": f"{ns}/MPIJob/bert",
        "ddp-node-0-1-abcde": f"{ns}/TrainJob/ddp",
        "train-worker-2": f"{ns}/Job.batch.volcano.sh/train",
        "sample-group-2": f"{ns}/Workload/sample-group",
        "debug-shell": f"{ns}/Pod/debug-shell",
        "nightly-29087640-abcde": f"{ns}/CronJob/nightly",
        "raycluster-kuberay-gpu-group-worker-x7k2p": f"{ns}/RayJob/rayjob-sample",
    }
    last = sensor.last()
    assert last is not None and all(p.uid for p in last.pods)
    reads = sensor.metric("owner_reads_total")  # each owner read once: the Jobs, the RayCluster
    for name in ("nightly-29087640-abcde", "raycluster-kuberay-gpu-group-worker-x7k2p", "job-3-x7k2p"):
        core.patch_namespaced_pod(name, ns, {"metadata": {"labels": {"touched": "yes"}}})
    core.delete_namespaced_pod("debug-shell", ns, grace_period_seconds=0)
    sensor.wait_for("the deleted pod gone", lambda k: "debug-shell" not in k)
    assert sensor.metric("owner_reads_total") == reads == 6  # five Jobs (four gone: their pods name them), a cluster
    assert sensor.metrics.get("xidpipe_agent_workloads_pods") == len(bodies) - 3


def test_a_watch_the_server_ends_resumes_and_the_snapshot_beats(
        admin_client: client.ApiClient, agent_kubeconfig: Path, node: client.V1Node, namespace: str,
        running: Callable[[str, WorkloadsSettings], Running]) -> None:
    core = client.CoreV1Api(admin_client)
    here = node.metadata.name
    core.create_namespaced_pod(namespace, gpu_pod(namespace, here, "job"))
    sensor = running(here, WorkloadsSettings(kube_config=str(agent_kubeconfig), watch_timeout_s=2, heartbeat_s=1))
    sensor.wait_for("the first pod", lambda k: k == {"pi-x7k2p": f"{namespace}/Job/pi"})
    poll("three watches the server ended", lambda: sensor.metric("watches_total") >= 3, 30)
    core.create_namespaced_pod(namespace, gpu_pod(namespace, here, "statefulset"))
    core.delete_namespaced_pod("pi-x7k2p", namespace, grace_period_seconds=0)
    sensor.wait_for("the change seen through the resumed watch",
                    lambda k: k == {"embeddings-2": f"{namespace}/StatefulSet/embeddings"})
    assert sensor.metric("lists_total") == 1  # resumed from its resourceVersion each time, never listed again
    last = sensor.last()
    assert last is not None
    poll("the snapshot sent again", lambda: [r.record_id for r in sensor.records].count(last.record_id) >= 2, 10)
    assert all(r == last for r in sensor.records if r.record_id == last.record_id)  # the same record again


def test_a_watch_from_a_version_the_restarted_api_server_lacks_lists_again(
        tmp_path: Path, running: Callable[[str, WorkloadsSettings], Running]) -> None:
    """The API server restarts while etcd moved on (what it reads after a restart is newer than the
    sensor's resourceVersion): the watch gets 410 Gone, and the sensor lists the pods again."""
    controlplane = load_controlplane()
    plane = controlplane.start()
    try:
        admin = client.ApiClient(make_configuration(plane, "admin"))
        core = client.CoreV1Api(admin)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team-a")))
        core.create_namespaced_service_account("team-a", client.V1ServiceAccount(
            metadata=client.V1ObjectMeta(name="default")))
        core.create_namespaced_pod("team-a", gpu_pod("team-a", "node-1", "job"))
        kubeconfig = kubeconfig_for(plane, plane.token("admin"), tmp_path / "kubeconfig")
        sensor = running("node-1", WorkloadsSettings(kube_config=str(kubeconfig), watch_timeout_s=60, retry_s=1))
        sensor.wait_for("the first pod", lambda k: k == {"pi-x7k2p": "team-a/Job/pi"})

        restart_apiserver(controlplane, plane)
        core.delete_namespaced_pod("pi-x7k2p", "team-a", grace_period_seconds=0)
        core.create_namespaced_pod("team-a", gpu_pod("team-a", "node-1", "deployment"))

        sensor.wait_for("the pods as listed again", lambda k: k == {
            "inference-7d4b9c8f6d-k2x9p": "team-a/Deployment/inference"}, timeout=60)
        poll("a second list", lambda: sensor.metric("lists_total") == 2, 30)
        assert sensor.metrics.get("xidpipe_agent_workloads_errors_total") >= 1  # the broken watch, retried
    finally:
        plane.stop()


def restart_apiserver(controlplane: Any, plane: Any) -> None:
    """Stop the test control plane's kube-apiserver, move etcd's revision on while it is down, and start
    it again with the same arguments (its port, certificates and tokens)."""
    proc = plane._processes["kube-apiserver"]
    argv = [str(a) for a in proc.args]
    etcd = next(a.split("=", 1)[1] for a in argv if a.startswith("--etcd-servers="))
    controlplane._terminate(proc.pid, proc)
    put = json.dumps({"key": base64.b64encode(b"/xidpipe-test/moved-on").decode(),
                      "value": base64.b64encode(b"1").decode()}).encode()
    for _ in range(3):  # etcd's v3 JSON gateway: each put is a new revision
        with urllib.request.urlopen(urllib.request.Request(f"{etcd}/v3/kv/put", data=put, method="POST"),
                                    timeout=10) as answer:
            assert answer.status == 200
    controlplane.spawn(plane, "kube-apiserver", argv, True)
    tls = ssl.create_default_context(cafile=str(plane.ca_file))
    controlplane.wait_ready(plane, "kube-apiserver", f"{plane.server}/readyz", time.monotonic() + 120,
                             context=tls, token=plane.token("admin"), accept=lambda body: body.strip() == "ok")


def test_the_agents_rights_are_what_the_sensor_reads(admin_client: client.ApiClient, agent_kubeconfig: Path,
                                                      namespace: str, node: client.V1Node,
                                                      make_pod: PodFactory) -> None:
    """Granted: list and watch pods, get Jobs and RayClusters. Refused: everything else it might be
    tempted to (Secrets, changing or deleting pods, other workload objects, nodes)."""
    from kubernetes import config

    agent = config.new_client_from_config(config_file=str(agent_kubeconfig))  # type: ignore[no-untyped-call]
    auth = client.AuthorizationV1Api(agent)

    def allowed(verb: str, resource: str, group: str = "", ns: str | None = namespace) -> bool:
        review = auth.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, group=group, namespace=ns))))
        return bool(review.status.allowed)

    assert allowed("list", "pods", ns=None) and allowed("watch", "pods", ns=None)
    assert allowed("get", "jobs", "batch") and allowed("get", "rayclusters", "ray.io")
    for verb, resource, group in [("get", "pods", ""), ("get", "secrets", ""), ("list", "secrets", ""),
                                  ("patch", "pods", ""), ("delete", "pods", ""), ("create", "pods/eviction", ""),
                                  ("list", "jobs", "batch"), ("get", "cronjobs", "batch"),
                                  ("get", "deployments", "apps"), ("list", "nodes", ""), ("patch", "nodes", ""),
                                  ("get", "configmaps", "")]:
        assert not allowed(verb, resource, group), f"the agent may {verb} {group or 'core'} {resource}"
    core = client.CoreV1Api(agent)
    pod = make_pod(node.metadata.name)
    assert status_of(lambda: core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.metadata.name}")
                     ) == 200
    assert status_of(lambda: core.read_namespaced_secret("anything", namespace)) == 403
    assert status_of(lambda: core.patch_namespaced_pod(pod.metadata.name, namespace,
                                                       {"metadata": {"labels": {"x": "y"}}})) == 403


def test_the_agent_builds_the_sensor_from_its_settings(tmp_path: Path) -> None:
    assert workloads_spec.settings(AgentSettings(node="n1", state_dir=tmp_path)) is None  # off by default
    got = workloads_spec.settings(AgentSettings(
        node="n1", state_dir=tmp_path, workloads_enabled=True, workloads_kube_config="/etc/kube/config",
        workloads_heartbeat_s=120, workloads_watch_timeout_s=30, gpu_resource_prefixes=["example.com/gpu"]))
    assert got == WorkloadsSettings(kube_config="/etc/kube/config", heartbeat_s=120, watch_timeout_s=30,
                                    resource_prefixes=("example.com/gpu",))


def test_an_owner_the_agent_may_not_read_leaves_the_pod_with_the_owner_it_names(
        admin_client: client.ApiClient, control_plane: Any, node: client.V1Node, namespace: str, tmp_path: Path,
        running: Callable[[str, WorkloadsSettings], Running]) -> None:
    """An identity that may watch pods but not read Jobs (a chart with narrower RBAC): a CronJob's pod
    is its Job's, not the CronJob's, and the refused read is not repeated before `retry_s`."""
    core, rbac = client.CoreV1Api(admin_client), client.RbacAuthorizationV1Api(admin_client)
    name = unique("pods-only")
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(
        name=name)))
    rbac.create_cluster_role({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                              "metadata": {"name": name},
                              "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]})
    rbac.create_cluster_role_binding({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]})
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=600))
    token = core.create_namespaced_service_account_token(name, namespace, request).status.token
    kubeconfig = kubeconfig_for(control_plane, str(token), tmp_path / "kubeconfig")
    core.create_namespaced_pod(namespace, gpu_pod(namespace, node.metadata.name, "cronjob"))

    sensor = running(node.metadata.name, WorkloadsSettings(kube_config=str(kubeconfig), retry_s=300))
    sensor.wait_for("the pod, its Job unread", lambda k: k == {"nightly-29087640-abcde": f"{namespace}/Job/"
                                                                                           "nightly-29087640"})
    core.create_namespaced_pod(namespace, gpu_pod(namespace, node.metadata.name, "cronjob", name="nightly-retry"))
    keys = sensor.wait_for("its Job's second pod", lambda k: len(k) == 2)
    assert set(keys.values()) == {f"{namespace}/Job/nightly-29087640"}
    assert sensor.metric("owner_reads_total") == 1  # refused once, not asked again within retry_s
