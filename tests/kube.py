"""A real kube-apiserver (with etcd) for the tests, with our RBAC applied; helpers for them.

One control plane per test session, started by ``deploy/testcluster/controlplane.py`` from the
binaries ``make testcluster`` builds. Clients are offered for three identities: ``admin``
(system:masters), ``worker`` (the xidpipe-worker service account, bound only by the Helm chart's
RBAC, ``deploy/helm/xidpipe``, rendered as release ``xidpipe`` in namespace ``xidpipe``) and ``nobody``
(no rights).

No scheduler, controller or kubelet runs here: tests bind pods and write the status controllers
would write. ``tests.cluster`` offers a second control plane that has them (kube-scheduler,
kube-controller-manager and KWOK's fake kubelets).

Under ``CI=true`` a missing binary or a control plane that does not start fails the tests;
elsewhere the tests are skipped with the reason.

A test that uses any of these fixtures gets the ``k8s`` marker (see ``tests.services``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import FailToCreateError, create_from_yaml

from tests.services import service_unavailable

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "xidpipe"
HELM_BUILD = REPO / "deploy" / "testcluster" / "build.sh"
CONTROLPLANE_PY = REPO / "deploy" / "testcluster" / "controlplane.py"

PodFactory = Callable[..., client.V1Pod]


def load_controlplane() -> ModuleType:
    """deploy/testcluster/controlplane.py as a module (deploy/ is not a Python package)."""
    name = "xidpipe_testcluster_controlplane"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, CONTROLPLANE_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def status_of(call: Callable[[], object]) -> int:
    """The HTTP status a client call ends with (200 when it succeeds)."""
    try:
        call()
    except ApiException as exc:
        return int(exc.status)
    return 200


def make_configuration(plane: Any, identity: str) -> client.Configuration:
    """A client Configuration that authenticates as one of the control plane's token identities."""
    return client.Configuration(
        host=plane.server,
        api_key={"BearerToken": plane.token(identity)},
        api_key_prefix={"BearerToken": "Bearer"},
        ssl_ca_cert=str(plane.ca_file),
    )






AGENT_NS = "xidpipe"  # the agent's ServiceAccount `xidpipe-agent` and the worker's `xidpipe-stream` (the chart's)


def agent_pod_token(core: client.CoreV1Api, node: str) -> tuple[str, str]:
    """(pod name, token): an agent pod on `node` and what the kubelet projects into it, a token for audience
    `xidpipe` bound to the pod (and so to its node); the agent's ServiceAccount made when missing."""
    accounts = {a.metadata.name for a in core.list_namespaced_service_account(AGENT_NS).items}
    if "xidpipe-agent" not in accounts:
        core.create_namespaced_service_account(
            AGENT_NS, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="xidpipe-agent")))
    pod = core.create_namespaced_pod(AGENT_NS, client.V1Pod(
        metadata=client.V1ObjectMeta(name=unique("xidpipe-agent")),
        spec=client.V1PodSpec(node_name=node, service_account_name="xidpipe-agent",
                              automount_service_account_token=False,
                              containers=[client.V1Container(name="agent", image="xidpipe:test")])))
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=["xidpipe"], expiration_seconds=3600,
        bound_object_ref=client.V1BoundObjectReference(kind="Pod", api_version="v1", name=pod.metadata.name,
                                                       uid=pod.metadata.uid)))
    token = core.create_namespaced_service_account_token("xidpipe-agent", AGENT_NS, request).status.token
    return str(pod.metadata.name), str(token)


def stream_token(core: client.CoreV1Api) -> str:
    """A token of the worker's ServiceAccount `xidpipe-stream` (the chart's templates/rbac.yaml)."""
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=3600))
    return str(core.create_namespaced_service_account_token("xidpipe-stream", AGENT_NS, request).status.token)


def kubeconfig_for(plane: Any, token: str, path: Path, server: str | None = None) -> Path:
    """A kubeconfig at `path` for the control plane (or `server`) that authenticates with `token`."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test",
                      "cluster": {"server": server or plane.server, "certificate-authority": str(plane.ca_file)}}],
        "users": [{"name": "test", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    return path


controlplane = load_controlplane()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[Any]:
    """A running etcd + kube-apiserver on loopback, stopped (and checked stopped) at session end."""
    try:
        plane = controlplane.start()
    except controlplane.ControlPlaneError as exc:
        service_unavailable("Kubernetes test control plane", str(exc))
    try:
        yield plane
    finally:
        pids = dict(plane.pids)
        plane.stop()
        # Nothing may be left running: neither by PID nor anything still using the work directory.
        leftover = {name: pid for name, pid in pids.items() if _pid_running(pid)}
        pgrep = subprocess.run(["pgrep", "-f", str(plane.workdir)], capture_output=True, text=True, check=False)
        assert not leftover and pgrep.returncode == 1, (
            f"control plane processes left running: {leftover} {pgrep.stdout.split()}"
        )


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def helm_binary() -> str:
    """The helm binary ``make testcluster`` built (a test that needs it fails under CI=true without it)."""
    proc = subprocess.run([str(HELM_BUILD), "--print-helm"], capture_output=True, text=True, timeout=60, check=False)
    path = Path(proc.stdout.strip())
    if proc.returncode != 0 or not path.is_file():
        service_unavailable("helm", f"{path} is not built {proc.stderr.strip()}".strip() + ": run `make testcluster`")
    return str(path)


def chart_rbac(*sets: str) -> list[dict[str, Any]]:
    """The chart's identities, RBAC and node-patch policy as release ``xidpipe`` in namespace
    ``xidpipe`` (the names the control plane's ``worker`` identity is bound to), after that
    Namespace and every other namespace they name (the remediation Jobs', by default the agent's);
    ``sets`` are extra ``--set`` values (e.g. ``respond.podLogsNamespaces={team}``)."""
    cmd = [helm_binary(), "template", "xidpipe", str(CHART), "--namespace", "xidpipe",
           "--show-only", "templates/rbac.yaml", "--show-only", "templates/node-policy.yaml"]
    for value in sets:
        cmd += ["--set", value]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"helm template failed: {proc.stderr}"
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    # The release namespace first, then any other the objects live in (the remediation Jobs' namespace).
    names = dict.fromkeys(["xidpipe", *(str(d["metadata"]["namespace"]) for d in docs
                                        if d.get("metadata", {}).get("namespace"))])
    return [*({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names), *docs]


def apply_rbac(admin: client.ApiClient, docs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Create the chart's RBAC (``chart_rbac()``) as admin; objects already there are kept."""
    docs = chart_rbac() if docs is None else docs
    for doc in docs:
        try:
            create_from_yaml(admin, yaml_objects=[doc])
        except FailToCreateError as exc:
            if any(getattr(e, "status", None) != 409 for e in exc.api_exceptions):
                raise
    return docs


@pytest.fixture(scope="session")
def admin_configuration(control_plane: Any) -> client.Configuration:
    return make_configuration(control_plane, "admin")


@pytest.fixture(scope="session")
def worker_configuration(control_plane: Any) -> client.Configuration:
    return make_configuration(control_plane, "worker")


@pytest.fixture(scope="session")
def nobody_configuration(control_plane: Any) -> client.Configuration:
    return make_configuration(control_plane, "nobody")


@pytest.fixture(scope="session")
def admin_client(admin_configuration: client.Configuration) -> Iterator[client.ApiClient]:
    with client.ApiClient(admin_configuration) as api_client:
        yield api_client


@pytest.fixture(scope="session")
def rbac_applied(admin_client: client.ApiClient) -> list[dict[str, Any]]:
    """The chart's RBAC applied to the API server as admin, once per session."""
    return apply_rbac(admin_client)


@pytest.fixture(scope="session")
def worker_client(worker_configuration: client.Configuration, rbac_applied: object) -> Iterator[client.ApiClient]:
    with client.ApiClient(worker_configuration) as api_client:
        yield api_client


@pytest.fixture(scope="session")
def nobody_client(nobody_configuration: client.Configuration, rbac_applied: object) -> Iterator[client.ApiClient]:
    with client.ApiClient(nobody_configuration) as api_client:
        yield api_client


@pytest.fixture
def admin_core(admin_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(admin_client)


@pytest.fixture
def worker_core(worker_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(worker_client)


@pytest.fixture
def nobody_core(nobody_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(nobody_client)


@pytest.fixture
def node(admin_core: client.CoreV1Api) -> Iterator[client.V1Node]:
    """A GPU node created by admin (no kubelet runs, so nothing else creates nodes)."""
    name = unique("gpu-node")
    created = admin_core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name=name, labels={"nvidia.com/gpu.present": "true"}),
            spec=client.V1NodeSpec(taints=[client.V1Taint(key="example.com/other-owner", effect="NoSchedule")]),
        )
    )
    yield created
    try:
        admin_core.delete_node(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def namespace(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A namespace with its ``default`` service account (the ServiceAccount admission plugin wants
    it, and no controller-manager runs to create it)."""
    name = unique("workload")
    admin_core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    admin_core.create_namespaced_service_account(
        name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="default"))
    )
    yield name
    # Without a namespace controller the namespace stays Terminating; it is throwaway anyway.
    admin_core.delete_namespace(name)


@pytest.fixture
def make_pod(admin_core: client.CoreV1Api, namespace: str) -> PodFactory:
    """Create a pod bound to a node (no scheduler runs); optionally mark it Running and Ready."""

    def factory(node_name: str, *, labels: dict[str, str] | None = None, running: bool = False) -> client.V1Pod:
        pod = admin_core.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=unique("trainer"), labels=labels or {"app": "trainer"}),
                spec=client.V1PodSpec(
                    node_name=node_name,
                    automount_service_account_token=False,
                    containers=[client.V1Container(name="main", image="registry.example/trainer:1")],
                ),
            ),
        )
        if running:
            # Play the kubelet: eviction only consults disruption budgets for running pods.
            pod = admin_core.patch_namespaced_pod_status(
                pod.metadata.name,
                namespace,
                {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
            )
        return pod

    return factory
