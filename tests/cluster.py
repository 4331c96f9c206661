"""A Kubernetes cluster with a scheduler, controllers and fake kubelets for the tests; helpers for it.

``tests.kube``'s control plane has no controller at all (tests play the kubelet and the
controllers there). This one, started once per session by ``deploy/testcluster/cluster.py`` and
only when a test asks for it, adds kube-scheduler, kube-controller-manager and KWOK: pods are
scheduled, Jobs run to completion, disruption budgets are computed, NoExecute taints and device
taints evict, ResourceClaims are allocated on ResourceSlice devices (docs/testcluster.md).

Fixtures
--------
``cluster`` (session)
    The running ControlPlane (``server``, ``ca_file``, ``token(identity)``, ``kubeconfig``,
    ``workdir`` with every component's log). Identities: admin, worker (bound by the chart's RBAC
    once ``cluster_worker_client`` is used), nobody, and the components' own.
``cluster_admin_client``, ``cluster_worker_client`` (session, ``kubernetes.client.ApiClient``)
``cluster_core`` (function, ``CoreV1Api`` as admin)
``cluster_namespace`` (function)
    A new namespace (its ``default`` service account is made by the service-account controller),
    deleted afterwards with everything in it (by the namespace controller).
``kwok_node`` (function)
    ``make(labels=None, gpus=8, name=None) -> V1Node``: a node KWOK manages, with capacity and
    allocatable ``nvidia.com/gpu: <gpus>`` (plus cpu, memory, pods) and a ``nodeInfo.bootID``,
    returned once Ready; deleted afterwards with its ResourceSlices.
``gpu_device_class`` (session, ``str``)
    The DeviceClass ``gpu.nvidia.com`` (NVIDIA's DRA driver's: driver and ``type == "gpu"``).

Helpers (plain functions): ``publish_gpu_slice`` (a node's ResourceSlice shaped like NVIDIA's DRA
driver's), ``reboot_node`` (a new bootID through KWOK's node-reboot stage), ``wait_for``,
``kwok_pod`` (a pod whose KWOK outcome and runtime are set by annotation).

A test that uses ``cluster`` gets the ``k8s`` marker (``tests.services``); under ``CI=true`` a
missing binary or a cluster that does not start fails it, elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kube import apply_rbac, make_configuration, unique
from tests.services import service_unavailable

REPO = Path(__file__).resolve().parents[1]
CLUSTER_PY = REPO / "deploy" / "testcluster" / "cluster.py"
GPU_DRIVER = "gpu.nvidia.com"
GPU_RESOURCE = "nvidia.com/gpu"
T = TypeVar("T")


def load_cluster() -> ModuleType:
    """deploy/testcluster/cluster.py as a module (deploy/ is not a Python package)."""
    name = "xidpipe_testcluster_cluster"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, CLUSTER_PY)
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


testcluster = load_cluster()
controlplane = testcluster.cp


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 60.0, interval_s: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy (which is returned); fail saying ``what``
    was awaited and the probe's last answer."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(interval_s)


# -- The cluster ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok, stopped (and checked
    stopped) at session end."""
    try:
        plane = testcluster.start_cluster()
    except controlplane.ControlPlaneError as exc:
        service_unavailable("Kubernetes test cluster (scheduler, controller-manager, KWOK)", str(exc))
    try:
        yield plane
    finally:
        pids = dict(plane.pids)
        plane.stop()
        leftover = {name: pid for name, pid in pids.items() if _running(pid)}
        pgrep = subprocess.run(["pgrep", "-f", str(plane.workdir)], capture_output=True, text=True, check=False)
        assert not leftover and pgrep.returncode == 1, f"cluster processes left running: {leftover} {pgrep.stdout}"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def cluster_admin_client(cluster: Any) -> Iterator[client.ApiClient]:
    with client.ApiClient(make_configuration(cluster, "admin")) as api_client:
        yield api_client


@pytest.fixture(scope="session")
def cluster_worker_client(cluster: Any, cluster_admin_client: client.ApiClient) -> Iterator[client.ApiClient]:
    """The worker's identity, with the chart's RBAC applied to this cluster (once)."""
    apply_rbac(cluster_admin_client)
    with client.ApiClient(make_configuration(cluster, "worker")) as api_client:
        yield api_client


@pytest.fixture
def cluster_core(cluster_admin_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(cluster_admin_client)


@pytest.fixture
def cluster_namespace(cluster_core: client.CoreV1Api) -> Iterator[str]:
    name = unique("workload")
    cluster_core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    wait_for(lambda: _exists(lambda: cluster_core.read_namespaced_service_account("default", name)),
             f"the default service account of namespace {name}")
    yield name
    cluster_core.delete_namespace(name)


def _exists(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


# -- KWOK nodes -----------------------------------------------------------------------------------
def node_ready(node: client.V1Node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def create_kwok_node(core: client.CoreV1Api, name: str, *, labels: dict[str, str] | None = None,
                     gpus: int = 8, timeout_s: float = 60.0) -> client.V1Node:
    """A node that KWOK manages, created as a kubelet registers one (capacity and nodeInfo in the
    create), returned once KWOK has made it Ready and the node lifecycle controller has lifted the
    ``node.kubernetes.io/not-ready`` taint that admission gives a new node (so it is schedulable)."""
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU_RESOURCE: str(gpus)}
    key, value = testcluster.KWOK_NODE_ANNOTATION
    core.create_node(client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name, annotations={key: value},
            labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
        ),
        status=client.V1NodeStatus(
            capacity=resources, allocatable=resources,
            node_info=client.V1NodeSystemInfo(
                boot_id=str(uuid.uuid4()), machine_id=uuid.uuid4().hex, system_uuid=str(uuid.uuid4()),
                architecture="amd64", operating_system="linux", os_image="Ubuntu 24.04 LTS",
                kernel_version="6.8.0-generic", container_runtime_version="kwok", kubelet_version="kwok",
                kube_proxy_version="kwok",
            ),
        ),
    ))
    return wait_for(lambda: _schedulable_node(core, name), f"node {name} Ready and untainted", timeout_s)


def _schedulable_node(core: client.CoreV1Api, name: str) -> client.V1Node | None:
    node = core.read_node(name)
    tainted = any(t.key.startswith("node.kubernetes.io/") for t in node.spec.taints or [])
    return node if node_ready(node) and not tainted else None


@pytest.fixture
def kwok_node(cluster_core: client.CoreV1Api, cluster_admin_client: client.ApiClient) -> Iterator[Callable[..., Any]]:
    made: list[str] = []

    def make(labels: dict[str, str] | None = None, gpus: int = 8, name: str | None = None) -> client.V1Node:
        node_name = name or unique("gpu-node")
        made.append(node_name)
        return create_kwok_node(cluster_core, node_name, labels={"nvidia.com/gpu.present": "true", **(labels or {})},
                                gpus=gpus)

    yield make
    resource = client.ResourceV1Api(cluster_admin_client)
    for name in made:
        for item in resource.list_resource_slice(field_selector=f"spec.nodeName={name}").items:
            _delete_quietly(lambda n=item.metadata.name: resource.delete_resource_slice(n))
        _delete_quietly(lambda n=name: cluster_core.delete_node(n))


def _delete_quietly(delete: Callable[[], object]) -> None:
    try:
        delete()
    except ApiException as exc:
        if exc.status != 404:
            raise


def reboot_node(core: client.CoreV1Api, name: str, timeout_s: float = 60.0) -> str:
    """Reboot a KWOK node: a new ``status.nodeInfo.bootID`` through the node-reboot stage
    (annotation ``testcluster.xidpipe.io/boot-id``), the node NotReady for a moment and then Ready
    again. Returns the new boot ID once the node reports it and is Ready."""
    boot_id = str(uuid.uuid4())
    core.patch_node(name, {"metadata": {"annotations": {testcluster.BOOT_ID_ANNOTATION: boot_id}}})

    def rebooted() -> client.V1Node | None:
        node = core.read_node(name)
        return node if node.status.node_info.boot_id == boot_id and node_ready(node) else None

    wait_for(rebooted, f"node {name} to come back Ready with boot ID {boot_id}", timeout_s)
    return boot_id


def kwok_pod(name: str, *, gpus: int = 0, outcome: str | None = None, runtime: str | None = None,
             exit_code: int | None = None, node_name: str | None = None, grace_s: int = 1,
             claims: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> client.V1Pod:
    """A pod for KWOK nodes: ``outcome`` ``Succeeded`` or ``Failed`` (else it runs until deleted),
    ``runtime`` a Go duration, ``gpus`` of ``nvidia.com/gpu``, ``claims`` {name in the pod:
    ResourceClaim name}; it tolerates KWOK's nodes being new (no taint but the not-ready ones)."""
    annotations = {}
    if outcome:
        annotations[testcluster.OUTCOME_ANNOTATION] = outcome
    if runtime:
        annotations[testcluster.RUNTIME_ANNOTATION] = runtime
    if exit_code is not None:
        annotations[testcluster.EXIT_CODE_ANNOTATION] = str(exit_code)
    resources = client.V1ResourceRequirements(
        limits={GPU_RESOURCE: str(gpus)} if gpus else None,
        claims=[client.CoreV1ResourceClaim(name=n) for n in claims] if claims else None,
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, annotations=annotations, labels=labels or {"app": "trainer"}),
        spec=client.V1PodSpec(
            node_name=node_name,
            termination_grace_period_seconds=grace_s,
            automount_service_account_token=False,
            restart_policy="Never",
            containers=[client.V1Container(name="main", image="registry.example/trainer:1", resources=resources)],
            resource_claims=[client.V1PodResourceClaim(name=n, resource_claim_name=c) for n, c in claims.items()]
            if claims else None,
        ),
    )


def pod_phase(core: client.CoreV1Api, namespace: str, name: str, phases: set[str]) -> client.V1Pod | None:
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in phases else None


# -- DRA: NVIDIA's GPUs as ResourceSlice devices ---------------------------------------------------
def gpu_device(index: int, gpu_uuid: str) -> dict[str, Any]:
    """One GPU as NVIDIA's DRA driver publishes it (cmd/gpu-kubelet-plugin/deviceinfo.go): device
    ``gpu-<minor>`` with ``type``, ``uuid``, product, architecture and versions, its memory as capacity."""
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "570.124.6"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x18 + 0x10 * index:02x}:00.0"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def publish_gpu_slice(admin: client.ApiClient, node_name: str, gpus: int = 8,
                      uuids: list[str] | None = None) -> dict[str, Any]:
    """The node's ResourceSlice as NVIDIA's DRA driver publishes it: driver ``gpu.nvidia.com``, pool
    = the node's name, devices ``gpu-0..N-1`` with a ``uuid`` attribute (``GPU-<uuid4>`` unless
    given). Returns the created slice (a dict); ``kwok_node`` deletes it with the node."""
    uuids = uuids or [f"GPU-{uuid.uuid4()}" for _ in range(gpus)]
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node_name}-{GPU_DRIVER}-"},
        "spec": {
            "driver": GPU_DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu_device(i, u) for i, u in enumerate(uuids)],
        },
    }
    created = client.ResourceV1Api(admin).create_resource_slice(body)
    return dict(admin.sanitize_for_serialization(created))


@pytest.fixture(scope="session")
def gpu_device_class(cluster_admin_client: client.ApiClient) -> str:
    """The DeviceClass NVIDIA's DRA driver installs for whole GPUs, created once."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": GPU_DRIVER},
        "spec": {"selectors": [{"cel": {
            "expression": f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'",
        }}]},
    }
    try:
        client.ResourceV1Api(cluster_admin_client).create_device_class(body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    return GPU_DRIVER
