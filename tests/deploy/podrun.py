"""Run the Helm chart's rendered pods from the image with ``podman kube play``, as a kubelet would.

The workloads' pod templates are submitted as Pods to the test kube-apiserver (so admission, the
ServiceAccount plugin's token volume included, mutates them as in a cluster), bound to a Node made
for the test. What a kubelet does and podman does not, this module does before ``kube play``,
each as the kubelet does it:

- ``runAsNonRoot``: refused when the effective user is 0 or the image's user is non-numeric and no
  ``runAsUser`` is set (kubernetes pkg/kubelet/kuberuntime/security_context_others.go,
  ``verifyRunAsNonRoot``; the messages are the kubelet's).
- Secret, ConfigMap and projected volumes: the keys (or ``items``) written with ``defaultMode`` or
  the item's mode (0644 by default); with ``fsGroup`` every file and directory is then given to
  that group and gains group read (0440 for read-only volumes, 0660 for emptyDir; directories
  setgid): pkg/volume/volume_linux.go, ``SetVolumeOwnership``. ``fsGroup`` is also a supplementary
  group of every container's process (podman: ``supplementalGroups``).
- ``serviceAccountToken`` sources: a TokenRequest for the pod's ServiceAccount, bound to the Pod,
  with the source's audience and expiry; the file is 0600, owned by the pods' common
  ``runAsUser``, when that user or ``fsGroup`` is set (pkg/volume/projected/projected.go). The
  ``kube-root-ca.crt`` ConfigMap the token volume reads is published into each namespace here, as
  the controller-manager's root-ca-cert-publisher does.
- env: ``envFrom`` then ``env``, ``secretKeyRef``/``configMapKeyRef`` (a missing non-optional key is
  ``CreateContainerConfigError``), ``fieldRef`` (``status.hostIP`` is 127.0.0.1 and
  ``status.podIP`` 127.0.0.2 (``POD_IP``): the pods run on the host's network, and a loopback address
  of its own tells what binds the pod IP from what binds 127.0.0.1), ``$(VAR)`` expansion in values, command and args,
  and the service links of every Service in the pod's namespace (``enableServiceLinks``, the
  kubernetes.io "Discovering services" environment variables). ``KUBERNETES_SERVICE_HOST``/``PORT``
  name the test apiserver, since no kube-proxy maps the ``kubernetes`` Service's ClusterIP.
- hostPath volumes: the ``type`` checked (``DirectoryOrCreate`` made 0755); the node's paths are
  those under ``node_root`` (a recorded node), except the ones passed through.
- emptyDir: a directory of mode 0777 (pkg/volume/emptydir/empty_dir.go), then fsGroup as above.
- probes: run by the runner against the pod IP, as a kubelet does (httpGet, success 200-399; exec
  in the container; tcpSocket), not by podman; readiness is the readiness probe, or "running" without one.

Deviations, each because nothing else can run here: every pod uses the host's network (the test
services listen on loopback); ``runtimeClassName``, scheduling and resource limits are left to
the cluster (no NVIDIA runtime, no cgroup delegation in the sandbox).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import re
import stat
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

Doc = dict[str, Any]
MANAGER = "xidpipe-podrun"
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")
PODMAN = ["podman", "--runtime", "runc"]
CONTAINERS_CONF = "[containers]\ndefault_ulimits = []\n"
HOST_IP = "127.0.0.1"
POD_IP = "127.0.0.2"  # every pod's; Linux answers on all of 127.0.0.0/8 without configuration
LOG_TAIL_LINES = 400  # a failed start's traceback comes before the retries and shutdown lines that follow it
LOG_TAIL_CHARS = 24_000


class PodFailed(Exception):
    """A pod that the kubelet refused, or that never became ready; the message carries its logs."""


class PodRefused(PodFailed):
    """The kubelet would not create the container (runAsNonRoot, a missing Secret key, a hostPath type)."""


class PodNotReady(PodFailed):
    """The pod ran, but its readiness probe never answered, or its container exited."""


def render(helm: str, chart: Path, values: list[Path], sets: list[str], release: str, namespace: str) -> list[Doc]:
    cmd = [helm, "template", release, str(chart), "--namespace", namespace]
    for path in values:
        cmd += ["--values", str(path)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"helm template failed: {proc.stderr}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@dataclass
class Cluster:
    """The test kube-apiserver as an admin sees it."""

    api: client.ApiClient
    server: str
    ca_file: Path

    def __post_init__(self) -> None:
        self.dyn = DynamicClient(self.api)
        self.core = client.CoreV1Api(self.api)

    def apply(self, doc: Doc) -> Doc:
        resource = self.dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        applied = self.dyn.server_side_apply(resource, body=doc, namespace=doc["metadata"].get("namespace"),
                                             field_manager=MANAGER, force_conflicts=True)
        return dict(applied.to_dict())

    def install(self, docs: list[Doc], secrets: list[Doc]) -> None:
        """Every object but the workloads, the test's Secrets, and each namespace's kube-root-ca.crt."""
        namespaces = {d["metadata"]["namespace"] for d in docs + secrets if d["metadata"].get("namespace")}
        for name in sorted(namespaces):
            with contextlib.suppress(client.exceptions.ApiException):
                self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        order = ("Namespace", "ServiceAccount", "ConfigMap", "Secret")
        rest = [d for d in docs if d["kind"] not in WORKLOADS]
        for doc in sorted(rest + secrets, key=lambda d: order.index(d["kind"]) if d["kind"] in order else 9):
            self.apply(doc)
        ca = self.ca_file.read_text()
        for name in sorted(namespaces):
            self.apply({"apiVersion": "v1", "kind": "ConfigMap", "data": {"ca.crt": ca},
                        "metadata": {"name": "kube-root-ca.crt", "namespace": name}})

    def node(self, name: str) -> None:
        self.apply({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}}})

    def admit(self, workload: Doc, node: str) -> Doc:
        """The workload's pod template created as a Pod bound to `node` (admission applied)."""
        template = copy.deepcopy(workload["spec"]["template"])
        name = f"{workload['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        pod = {"apiVersion": "v1", "kind": "Pod", "spec": {**template["spec"], "nodeName": node},
               "metadata": {"name": name, "namespace": workload["metadata"]["namespace"],
                            "labels": template["metadata"].get("labels", {}),
                            "annotations": template["metadata"].get("annotations", {})}}
        created = self.core.create_namespaced_pod(pod["metadata"]["namespace"], pod)
        return dict(self.api.sanitize_for_serialization(created))

    def read(self, kind: str, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's (decoded) or ConfigMap's data, or None when it does not exist."""
        try:
            if kind == "Secret":
                obj = self.core.read_namespaced_secret(name, namespace)
                return {k: base64.b64decode(v).decode() for k, v in (obj.data or {}).items()}
            return dict(self.core.read_namespaced_config_map(name, namespace).data or {})
        except client.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def token(self, pod: Doc, account: str, audience: str | None, seconds: int) -> str:
        meta = pod["metadata"]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [audience] if audience else [], "expirationSeconds": seconds,
                         "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                                            "uid": meta["uid"]}}}
        answer = self.core.create_namespaced_service_account_token(account, meta["namespace"], body)
        return str(answer.status.token)

    def service_env(self, namespace: str) -> dict[str, str]:
        """The service links of every Service in `namespace` (Docker-link style and *_SERVICE_*)."""
        env: dict[str, str] = {}
        for svc in self.core.list_namespaced_service(namespace).items:
            ip = svc.spec.cluster_ip
            if not ip or ip == "None":
                continue
            base = svc.metadata.name.upper().replace("-", "_")
            ports = svc.spec.ports or []
            env[f"{base}_SERVICE_HOST"] = ip
            for i, p in enumerate(ports):
                proto = (p.protocol or "TCP").upper()
                if i == 0:
                    env[f"{base}_SERVICE_PORT"] = str(p.port)
                    env[f"{base}_PORT"] = f"{proto.lower()}://{ip}:{p.port}"
                if p.name:
                    env[f"{base}_SERVICE_PORT_{p.name.upper().replace('-', '_')}"] = str(p.port)
                link = f"{base}_PORT_{p.port}_{proto}"
                env.update({link: f"{proto.lower()}://{ip}:{p.port}", f"{link}_PROTO": proto.lower(),
                            f"{link}_PORT": str(p.port), f"{link}_ADDR": ip})
        return env


def image_user(image: str) -> str:
    proc = subprocess.run([*PODMAN, "image", "inspect", "--format", "{{.Config.User}}", image],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise PodRefused(f"ErrImageNeverPull: image {image} is not present: {proc.stderr.strip()}")
    return proc.stdout.strip()


def effective(pod: Doc, container: Doc, key: str) -> Any:
    """A security setting as the kubelet resolves it: the container's, else the pod's."""
    own = (container.get("securityContext") or {}).get(key)
    return own if own is not None else (pod["spec"].get("securityContext") or {}).get(key)


def verify_run_as_non_root(pod: Doc, container: Doc, user: str) -> None:
    """The kubelet's verifyRunAsNonRoot, with its messages."""
    if not effective(pod, container, "runAsNonRoot"):
        return
    where = f"(pod: \"{pod['metadata']['name']}_{pod['metadata']['namespace']}\", container: {container['name']})"
    uid = effective(pod, container, "runAsUser")
    if uid is not None:
        if int(uid) == 0:
            raise PodRefused(f"container's runAsUser breaks non-root policy {where}")
        return
    name = user.split(":", 1)[0]
    if name and not name.isdigit():
        raise PodRefused(f"container has runAsNonRoot and image has non-numeric user ({name}), "
                         f"cannot verify user is non-root {where}")
    if not name or int(name) == 0:
        raise PodRefused(f"container has runAsNonRoot and image will run as root {where}")


def fs_user(pod: Doc) -> int | None:
    """The one runAsUser every container runs as, else None (the kubelet's FsUserFrom)."""
    users = {effective(pod, c, "runAsUser") for c in pod["spec"]["containers"]}
    return int(users.pop()) if len(users) == 1 and None not in users else None


@dataclass
class Prepared:
    """One pod made ready for `podman kube play`."""

    pod: Doc
    directory: Path
    volumes: dict[str, Path] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def spec_file(self) -> Path:
        return self.directory / "pod.yaml"

    def container_name(self, container: str) -> str:
        return f"{self.name}-{container}"


class Kubelet:
    """What the kubelet does before the runtime runs a pod (volumes, env, user checks)."""

    def __init__(self, cluster: Cluster, workdir: Path, node_root: Path, passthrough: frozenset[str]) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.node_root = node_root
        self.passthrough = passthrough
        self.apiserver = cluster.server.split("//", 1)[1].rsplit(":", 1)

    def prepare(self, pod: Doc) -> Prepared:
        prepared = Prepared(pod, self.workdir / pod["metadata"]["name"])
        prepared.directory.mkdir(parents=True)
        for c in pod["spec"]["containers"]:
            verify_run_as_non_root(pod, c, image_user(c["image"]))
        for volume in pod["spec"].get("volumes", []):
            prepared.volumes[volume["name"]] = self.volume(prepared, volume)
        for c in pod["spec"]["containers"]:
            prepared.env[c["name"]] = self.environment(pod, c)
        prepared.spec_file.write_text(yaml.safe_dump(self.podman_pod(prepared)))
        return prepared

    # --- volumes --------------------------------------------------------------------------------
    def volume(self, prepared: Prepared, volume: Doc) -> Path:
        pod = prepared.pod
        ns = pod["metadata"]["namespace"]
        group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        target = prepared.directory / "volumes" / volume["name"]
        if "hostPath" in volume:
            return self.host_path(volume)
        if "emptyDir" in volume:
            target.mkdir(parents=True)
            target.chmod(0o777)
            set_ownership(target, group, read_only=False)
            return target
        files: dict[str, tuple[str, int, int | None]] = {}
        if "secret" in volume or "configMap" in volume:
            kind = "Secret" if "secret" in volume else "ConfigMap"
            source = volume.get("secret") or volume["configMap"]
            mode = int(source.get("defaultMode", 0o644))
            files = self.keys(kind, ns, source.get("secretName") or source.get("name"), source, mode)
        elif "projected" in volume:
            files = self.projected(pod, volume["projected"])
        else:
            raise PodRefused(f"volume {volume['name']}: a kind this runner does not materialise: {sorted(volume)}")
        target.mkdir(parents=True)
        for path, (data, mode, owner) in files.items():
            file = target / path
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(data)
            file.chmod(mode)
            if owner is not None:
                os.chown(file, owner, -1)
        set_ownership(target, group, read_only=True)
        return target

    def host_path(self, volume: Doc) -> Path:
        spec = volume["hostPath"]
        path = spec["path"]
        host = Path(path) if path in self.passthrough else self.node_root / path.lstrip("/")
        kind = spec.get("type", "")
        checks = {"Directory": Path.is_dir, "File": Path.is_file, "Socket": Path.is_socket,
                  "CharDevice": Path.is_char_device, "BlockDevice": Path.is_block_device}
        if kind == "DirectoryOrCreate" and not host.exists():
            host.mkdir(parents=True, mode=0o755)
        elif kind == "FileOrCreate" and not host.exists():
            host.parent.mkdir(parents=True, exist_ok=True)
            host.touch(mode=0o644)
        elif kind in checks and not checks[kind](host):
            raise PodRefused(f'MountVolume.SetUp failed for volume "{volume["name"]}": hostPath type check failed: '
                             f"{path} is not a {kind}")
        return host

    def keys(self, kind: str, ns: str, name: str, source: Doc, mode: int) -> dict[str, tuple[str, int, int | None]]:
        data = self.cluster.read(kind, ns, name)
        optional = bool(source.get("optional"))
        if data is None:
            if optional:
                return {}
            raise PodRefused(f'MountVolume.SetUp failed: {kind.lower()} "{name}" not found')
        items = source.get("items") or [{"key": k, "path": k} for k in sorted(data)]
        files: dict[str, tuple[str, int, int | None]] = {}
        for item in items:
            if item["key"] not in data:
                if optional:
                    continue
                raise PodRefused(f'MountVolume.SetUp failed: configuration key "{item["key"]}" not found in '
                                 f'{kind} {ns}/{name}')
            files[item["path"]] = (data[item["key"]], int(item.get("mode", mode)), None)
        return files

    def projected(self, pod: Doc, spec: Doc) -> dict[str, tuple[str, int, int | None]]:
        mode = int(spec.get("defaultMode", 0o644))
        group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
        user = fs_user(pod)
        files: dict[str, tuple[str, int, int | None]] = {}
        ns = pod["metadata"]["namespace"]
        for source in spec.get("sources", []):
            if "serviceAccountToken" in source:
                sat = source["serviceAccountToken"]
                token = self.cluster.token(pod, pod["spec"].get("serviceAccountName") or "default",
                                           sat.get("audience"), int(sat.get("expirationSeconds", 3600)))
                token_mode = 0o600 if user is not None or group is not None else mode
                files[sat["path"]] = (token, token_mode, user)
            elif "configMap" in source or "secret" in source:
                kind = "ConfigMap" if "configMap" in source else "Secret"
                src = source.get("configMap") or source["secret"]
                files.update(self.keys(kind, ns, src["name"], src, mode))
            elif "downwardAPI" in source:
                for item in source["downwardAPI"]["items"]:
                    value = field_value(pod, item["fieldRef"]["fieldPath"])
                    files[item["path"]] = (value, int(item.get("mode", mode)), None)
        return files

    # --- env ------------------------------------------------------------------------------------
    def environment(self, pod: Doc, container: Doc) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            kind = "Secret" if "secretRef" in source else "ConfigMap"
            ref = source.get("secretRef") or source["configMapRef"]
            data = self.cluster.read(kind, ns, ref["name"])
            if data is None and not ref.get("optional"):
                raise PodRefused(f'CreateContainerConfigError: {kind.lower()} "{ref["name"]}" not found')
            env.update({source.get("prefix", "") + k: v for k, v in (data or {}).items()})
        services = {"KUBERNETES_SERVICE_HOST": self.apiserver[0], "KUBERNETES_SERVICE_PORT": self.apiserver[1],
                    "KUBERNETES_SERVICE_PORT_HTTPS": self.apiserver[1]}
        if pod["spec"].get("enableServiceLinks", True):
            services = {**self.cluster.service_env(ns), **services}
        for item in container.get("env", []):
            if "valueFrom" not in item:
                env[item["name"]] = expand(item.get("value", ""), {**services, **env})
                continue
            value = self.value_from(pod, item["name"], item["valueFrom"])
            if value is not None:
                env[item["name"]] = value
        return {**{k: v for k, v in services.items() if k not in env}, **env}

    def value_from(self, pod: Doc, name: str, source: Doc) -> str | None:
        if "fieldRef" in source:
            return field_value(pod, source["fieldRef"]["fieldPath"])
        kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
        ref = source.get("secretKeyRef") or source.get("configMapKeyRef")
        if ref is None:
            raise PodRefused(f"env {name}: a source this runner does not resolve: {sorted(source)}")
        data = self.cluster.read(kind, pod["metadata"]["namespace"], ref["name"])
        if data is not None and ref["key"] in data:
            return data[ref["key"]]
        if ref.get("optional"):
            return None
        what = f'{kind.lower()} "{ref["name"]}" not found' if data is None else \
            f"couldn't find key {ref['key']} in {kind} {pod['metadata']['namespace']}/{ref['name']}"
        raise PodRefused(f"CreateContainerConfigError: {what}")

    # --- what podman plays ----------------------------------------------------------------------
    def podman_pod(self, prepared: Prepared) -> Doc:
        pod = prepared.pod
        security = copy.deepcopy(pod["spec"].get("securityContext") or {})
        if "fsGroup" in security:
            security["supplementalGroups"] = sorted({*security.get("supplementalGroups", []), security["fsGroup"]})
        containers = []
        for c in pod["spec"]["containers"]:
            env = prepared.env[c["name"]]
            # `ports` only name ports on the host's network (podman would map them, which it cannot
            # there); the probes find them in the pod as admitted.
            mine = {k: v for k, v in c.items() if k in ("name", "image", "workingDir", "securityContext",
                                                         "volumeMounts", "stdin", "tty")}
            mine["imagePullPolicy"] = "Never"
            for key in ("command", "args"):
                if key in c:
                    mine[key] = [expand(a, env) for a in c[key]]
            mine["env"] = [{"name": k, "value": v} for k, v in env.items()]
            containers.append(mine)
        volumes = []
        for v in pod["spec"].get("volumes", []):
            path = prepared.volumes[v["name"]]
            volumes.append({"name": v["name"], "hostPath": {"path": str(path),
                                                            "type": "File" if path.is_file() else ""}})
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": prepared.name, "labels": pod["metadata"].get("labels", {})},
                "spec": {"hostNetwork": True, "restartPolicy": pod["spec"].get("restartPolicy", "Always"),
                         "securityContext": security, "containers": containers, "volumes": volumes,
                         "terminationGracePeriodSeconds": 5}}


def set_ownership(root: Path, group: int | None, *, read_only: bool) -> None:
    """SetVolumeOwnership: group `group`, group read (and write unless read-only), setgid directories."""
    if group is None:
        return
    mask = 0o440 if read_only else 0o660
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        os.lchown(path, info.st_uid, int(group))
        extra = mask | stat.S_ISGID | 0o110 if path.is_dir() else mask
        path.chmod(stat.S_IMODE(info.st_mode) | extra)


def field_value(pod: Doc, path: str) -> str:
    meta, spec = pod["metadata"], pod["spec"]
    values = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
              "spec.nodeName": spec["nodeName"], "spec.serviceAccountName": spec.get("serviceAccountName", ""),
              "status.podIP": POD_IP, "status.hostIP": HOST_IP, "status.podIPs": POD_IP}
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return str(meta.get(match.group(1), {}).get(match.group(2), ""))
    if path not in values:
        raise PodRefused(f"fieldRef {path}: not a field the downward API offers")
    return str(values[path])


def expand(value: str, env: dict[str, str]) -> str:
    """$(VAR) from `env`; $$(VAR) is a literal $(VAR); unknown references stay as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), value)


class Podman:
    """`podman kube play` of prepared pods, their probes, their logs, and their removal."""

    def __init__(self, workdir: Path) -> None:
        conf = workdir / "containers.conf"
        conf.write_text(CONTAINERS_CONF)  # the sandbox lacks CAP_SYS_RESOURCE for podman's default ulimits
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.played: list[Prepared] = []

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False,
                              env=self.env)

    def play(self, prepared: Prepared) -> None:
        self.played.append(prepared)
        proc = self.run("kube", "play", str(prepared.spec_file), timeout=300)
        if proc.returncode != 0:
            raise PodFailed(f"podman kube play {prepared.name}: {proc.stdout}{proc.stderr}")

    def state(self, prepared: Prepared, container: str) -> Doc:
        proc = self.run("container", "inspect", "--format", "{{json .State}}", prepared.container_name(container))
        return dict(json.loads(proc.stdout)) if proc.returncode == 0 else {}

    def logs(self, prepared: Prepared) -> str:
        parts = []
        for c in prepared.pod["spec"]["containers"]:
            proc = self.run("logs", "--tail", str(LOG_TAIL_LINES), prepared.container_name(c["name"]))
            parts.append(f"--- {prepared.container_name(c['name'])} ({self.state(prepared, c['name'])})\n"
                         f"{proc.stdout[-LOG_TAIL_CHARS:]}{proc.stderr[-LOG_TAIL_CHARS:]}")
        return "\n".join(parts)

    def probe(self, prepared: Prepared, container: Doc, probe: Doc) -> str:
        """'' when the probe succeeds, else why not (the kubelet's prober, for one attempt)."""
        timeout = float(probe.get("timeoutSeconds", 1))
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = named_port(container, get["port"])
            url = f"{get.get('scheme', 'HTTP').lower()}://{get.get('host') or POD_IP}:{port}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as answer:
                    return "" if 200 <= answer.status < 400 else f"{url}: HTTP {answer.status}"
            except urllib.error.HTTPError as exc:
                return f"{url}: HTTP {exc.code} {exc.read()[:300]!r}"
            except OSError as exc:
                return f"{url}: {exc}"
        if "exec" in probe:
            proc = self.run("exec", prepared.container_name(container["name"]), *probe["exec"]["command"],
                            timeout=timeout + 30)
            return "" if proc.returncode == 0 else f"exec exit {proc.returncode}: {proc.stdout}{proc.stderr}"
        if "tcpSocket" in probe:
            import socket

            port = named_port(container, probe["tcpSocket"]["port"])
            try:
                socket.create_connection((probe["tcpSocket"].get("host") or POD_IP, port), timeout=timeout).close()
            except OSError as exc:
                return f"tcp {port}: {exc}"
            return ""
        raise PodFailed(f"probe of a kind this runner does not run: {sorted(probe)}")

    def wait_ready(self, prepared: Prepared, timeout_s: float, settle_s: float = 0.0) -> dict[str, str]:
        """Poll every container until it runs and its startup and readiness probes pass.

        Returns, per container, which probe made it ready ('readinessProbe', or 'running' without one);
        raises PodNotReady with the pod's logs when the deadline passes or a container exits."""
        deadline = time.monotonic() + timeout_s
        ready: dict[str, str] = {}
        why = "not started"
        while True:
            for c in prepared.pod["spec"]["containers"]:
                if c["name"] in ready:
                    continue
                state = self.state(prepared, c["name"])
                if not state.get("Running"):
                    why = f"{c['name']}: not running ({state.get('Status')}, exit {state.get('ExitCode')})"
                    if state.get("Status") == "exited" and prepared.pod["spec"].get("restartPolicy") == "Never":
                        raise PodNotReady(f"{prepared.name}: {why}\n{self.logs(prepared)}")
                    continue
                failed = next((w for w in (self.probe(prepared, c, c[k]) for k in ("startupProbe", "readinessProbe")
                                           if k in c) if w), "")
                if failed:
                    why = f"{c['name']}: {failed}"
                    continue
                ready[c["name"]] = "readinessProbe" if "readinessProbe" in c else "running"
            if len(ready) == len(prepared.pod["spec"]["containers"]):
                self.stays_ready(prepared, settle_s)
                return ready
            if time.monotonic() >= deadline:
                raise PodNotReady(f"{prepared.name} not ready in {timeout_s:.0f} s: {why}\n{self.logs(prepared)}")
            time.sleep(1.0)

    def stays_ready(self, prepared: Prepared, settle_s: float) -> None:
        """Keep probing for `settle_s`: `failureThreshold` (default 3) failures in a row, or a container
        that stops running, make the pod not ready, as the kubelet's prober would."""
        deadline = time.monotonic() + settle_s
        failures = {c["name"]: 0 for c in prepared.pod["spec"]["containers"]}
        while time.monotonic() < deadline:
            for c in prepared.pod["spec"]["containers"]:
                probe = c.get("readinessProbe")
                running = self.state(prepared, c["name"]).get("Running")
                why = "" if running else "stopped running"
                if running and probe:
                    why = self.probe(prepared, c, probe)
                failures[c["name"]] = failures[c["name"]] + 1 if why else 0
                if failures[c["name"]] >= int((probe or {}).get("failureThreshold", 3)):
                    raise PodNotReady(f"{prepared.name} became not ready: {c['name']}: {why}\n{self.logs(prepared)}")
            time.sleep(1.0)

    def down(self) -> list[str]:
        """`podman kube down` and removal of every pod played, the last first; what could not be removed."""
        problems = []
        for prepared in reversed(self.played):
            down = self.run("kube", "down", str(prepared.spec_file), timeout=120)
            rm = self.run("pod", "rm", "--force", "--ignore", prepared.name, timeout=120)
            if rm.returncode != 0:
                problems.append(f"{prepared.name}: {down.stderr} {rm.stderr}")
        self.played.clear()
        return problems


def named_port(container: Doc, port: int | str) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports", []):
        if p.get("name") == port:
            return int(p["containerPort"])
    raise PodFailed(f"probe names port {port!r}, which container {container['name']} does not declare")
