"""Start and stop a throwaway Kubernetes control plane (etcd + kube-apiserver) on loopback.

No kubelet, scheduler or controller-manager runs: the API server enforces authentication
(a static token file), RBAC and admission, and stores objects in a private etcd. That is what
the RBAC and Kubernetes-adapter tests need. ``cluster.py`` beside this file adds kube-scheduler,
kube-controller-manager and KWOK's fake kubelets to such a control plane.

As a script:

    python deploy/testcluster/controlplane.py start [--workdir DIR]   # detached; prints DIR and KUBECONFIG
    python deploy/testcluster/controlplane.py stop DIR                # stops both processes by PID
    python deploy/testcluster/controlplane.py run                     # foreground until Ctrl-C

Imported (see tests/kube.py): ``plane = start(); ...; plane.stop()``.

Binaries come from ``build.sh --print-bin`` (``make testcluster`` builds them), or from
``KUBE_APISERVER_BIN`` and ``ETCD_BIN`` when both are set. The identities in the token file:

- ``admin``: group ``system:masters``;
- ``worker``: user ``system:serviceaccount:xidpipe:xidpipe-worker`` with groups
  ``system:serviceaccounts`` and ``system:serviceaccounts:xidpipe``, i.e. the worker's service
  account, which has only what the Helm chart's RBAC grants it;
- ``nobody``: user ``nobody``, no group, no rights.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
LOOPBACK = "127.0.0.1"
WORKER_NAMESPACE = "xidpipe"
WORKER_SERVICE_ACCOUNT = "xidpipe-worker"
WORKER_USER = f"system:serviceaccount:{WORKER_NAMESPACE}:{WORKER_SERVICE_ACCOUNT}"
WORKER_GROUPS = ("system:serviceaccounts", f"system:serviceaccounts:{WORKER_NAMESPACE}")
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Seconds to wait for etcd and then the API server to report ready. A cold start on a busy
# 2-core machine takes about 10 s; the default leaves room for a slower CI runner.
DEFAULT_START_TIMEOUT_S = float(os.environ.get("XIDPIPE_TESTCLUSTER_START_TIMEOUT", "120"))
# Seconds a process gets to exit after SIGTERM before it is sent SIGKILL.
STOP_GRACE_S = 10.0
STATE_FILE = "controlplane.json"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started; the message says why (with a log tail)."""


class BinariesMissing(ControlPlaneError):
    """kube-apiserver or etcd is not built (run ``make testcluster``)."""


@dataclass(frozen=True)
class Identity:
    """A user of the static token file."""

    name: str
    user: str
    groups: tuple[str, ...]
    token: str


@dataclass
class ControlPlane:
    """A running control plane: where to reach it, whom to be, and what to stop."""

    workdir: Path
    server: str
    ca_file: Path
    identities: dict[str, Identity]
    pids: dict[str, int]
    logs: dict[str, Path]
    keep_workdir: bool = False
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    def token(self, identity: str) -> str:
        return self.identities[identity].token

    def stop(self) -> None:
        """Stop every process by PID, the last started first (so kube-apiserver before etcd);
        remove the work directory."""
        for name, pid in reversed(self.pids.items()):
            _terminate(pid, self._processes.get(name))
        self.pids.clear()
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def save_state(self) -> None:
        """Write what ``stop_workdir`` needs (PIDs, identities) to the work directory."""
        (self.workdir / STATE_FILE).write_text(json.dumps(self.to_state(), indent=2))

    def alive(self) -> dict[str, bool]:
        return {name: _pid_alive(pid, self._processes.get(name)) for name, pid in self.pids.items()}

    def to_state(self) -> dict[str, object]:
        return {
            "workdir": str(self.workdir),
            "server": self.server,
            "ca_file": str(self.ca_file),
            "kubeconfig": str(self.kubeconfig),
            "pids": self.pids,
            "logs": {k: str(v) for k, v in self.logs.items()},
            "identities": {
                k: {"user": v.user, "groups": list(v.groups), "token": v.token}
                for k, v in self.identities.items()
            },
        }

    @classmethod
    def from_state(cls, state: dict[str, object]) -> ControlPlane:
        identities = {
            name: Identity(name, v["user"], tuple(v["groups"]), v["token"])
            for name, v in state["identities"].items()  # type: ignore[attr-defined]
        }
        return cls(
            workdir=Path(str(state["workdir"])),
            server=str(state["server"]),
            ca_file=Path(str(state["ca_file"])),
            identities=identities,
            pids=dict(state["pids"]),  # type: ignore[call-overload]
            logs={k: Path(v) for k, v in state["logs"].items()},  # type: ignore[attr-defined]
        )


def built_binaries(*names: str) -> list[Path]:
    """Where ``build.sh`` builds each named binary (``--print-bin``), or raise BinariesMissing
    saying which are not built and what to do about it."""
    try:
        out = subprocess.run(
            [str(BUILD_SCRIPT), "--print-bin", *names], check=True, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BinariesMissing(f"cannot locate {', '.join(names)} ({BUILD_SCRIPT}): {exc}") from exc
    paths = [Path(line) for line in out.stdout.split()]
    missing = [str(p) for p in paths if not (p.is_file() and os.access(p, os.X_OK))]
    if len(paths) != len(names) or missing:
        raise BinariesMissing(f"test binaries missing: {', '.join(missing) or names}; run `make testcluster`")
    return paths


def find_binaries() -> tuple[Path, Path]:
    """Return (kube-apiserver, etcd), or raise BinariesMissing with what to do about it."""
    env_apiserver, env_etcd = os.environ.get("KUBE_APISERVER_BIN"), os.environ.get("ETCD_BIN")
    if not (env_apiserver and env_etcd):
        apiserver, etcd = built_binaries("kube-apiserver", "etcd")
        return apiserver, etcd
    candidates = (Path(env_apiserver), Path(env_etcd))
    missing = [str(p) for p in candidates if not (p.is_file() and os.access(p, os.X_OK))]
    if missing:
        raise BinariesMissing(f"test control plane binaries missing: {', '.join(missing)} "
                              "[KUBE_APISERVER_BIN / ETCD_BIN]")
    return candidates


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def start(
    workdir: Path | None = None,
    *,
    binaries: tuple[Path, Path] | None = None,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    die_with_parent: bool = True,
    keep_workdir: bool = False,
    extra_identities: tuple[tuple[str, str, tuple[str, ...]], ...] = (),
) -> ControlPlane:
    """Start etcd and kube-apiserver on free loopback ports and wait until both are ready.

    ``extra_identities`` adds token identities (name, user, groups) beside admin, worker and nobody.

    ``die_with_parent`` asks the kernel to SIGKILL both processes if the calling process dies
    without stopping them (a killed test run leaves nothing behind). On failure everything
    started is stopped again and ControlPlaneError says why.
    """
    apiserver_bin, etcd_bin = binaries or find_binaries()
    if shutil.which("openssl") is None:
        raise ControlPlaneError("openssl is needed to generate the test certificates and keys")
    workdir = Path(tempfile.mkdtemp(prefix="xidpipe-k8s-")) if workdir is None else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    pki = workdir / "pki"
    pki.mkdir(exist_ok=True)
    _generate_pki(pki)
    identities = _write_token_file(workdir / "tokens.csv", extra_identities)
    plane = ControlPlane(
        workdir=workdir,
        server="",
        ca_file=pki / "ca.crt",
        identities=identities,
        pids={},
        logs={},
        keep_workdir=keep_workdir,
    )
    deadline = time.monotonic() + timeout_s
    try:
        etcd_url = _start_etcd(plane, etcd_bin, die_with_parent)
        wait_ready(plane, "etcd", f"{etcd_url}/health", deadline, context=None, token=None,
                    accept=lambda body: '"health":"true"' in body.replace(" ", ""))
        port = free_port()
        plane.server = f"https://{LOOPBACK}:{port}"
        _start_apiserver(plane, apiserver_bin, etcd_url, port, die_with_parent)
        tls = ssl.create_default_context(cafile=str(plane.ca_file))
        admin = plane.token("admin")
        wait_ready(plane, "kube-apiserver", f"{plane.server}/readyz", deadline, context=tls, token=admin,
                    accept=lambda body: body.strip() == "ok")
        # The system namespaces ("default", "kube-system") are created just after start-up.
        wait_ready(plane, "kube-apiserver", f"{plane.server}/api/v1/namespaces/default", deadline,
                    context=tls, token=admin, accept=lambda body: '"name":"default"' in body)
    except BaseException:
        plane.stop()
        raise
    _write_kubeconfig(plane)
    plane.save_state()
    return plane


def _run_openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _generate_pki(pki: Path) -> None:
    """A throwaway CA, a serving certificate for 127.0.0.1/localhost, and service-account keys."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _run_openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
                 "-subj", "/CN=xidpipe-testcluster-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=pki)
    _run_openssl("req", "-new", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr",
                 "-subj", "/CN=kube-apiserver", cwd=pki)
    (pki / "apiserver.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
        f"subjectAltName=IP:{LOOPBACK},DNS:localhost,DNS:kubernetes.default.svc\n"
    )
    _run_openssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "apiserver.ext", "-out", "apiserver.crt",
                 cwd=pki)
    _run_openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _run_openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for key in ("ca.key", "apiserver.key", "sa.key"):
        (pki / key).chmod(0o600)


def _write_token_file(path: Path, extra: tuple[tuple[str, str, tuple[str, ...]], ...] = ()) -> dict[str, Identity]:
    identities = {
        "admin": Identity("admin", "admin", ("system:masters",), secrets.token_hex(16)),
        "worker": Identity("worker", WORKER_USER, WORKER_GROUPS, secrets.token_hex(16)),
        "nobody": Identity("nobody", "nobody", (), secrets.token_hex(16)),
    }
    for name, user, groups in extra:
        identities[name] = Identity(name, user, groups, secrets.token_hex(16))
    # token,user,uid[,"group1,group2"]; no fourth column for no groups (it would mean group "").
    lines = [
        f"{i.token},{i.user},uid-{i.name}" + (f',"{",".join(i.groups)}"' if i.groups else "")
        for i in identities.values()
    ]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return identities


def _parent_death_signal() -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def set_signal() -> None:
        # SIGKILL, not SIGTERM: both processes get it at once, and an API server shutting down
        # gracefully while its etcd goes away waits on etcd far longer than a test run should.
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)

    return set_signal


def spawn(plane: ControlPlane, name: str, argv: list[str], die_with_parent: bool) -> None:
    """Start ``argv`` as process ``name`` of the plane: its own session, output to WORKDIR/NAME.log,
    SIGKILLed by the kernel if the caller dies (``die_with_parent``)."""
    log_path = plane.workdir / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=plane.workdir,
            start_new_session=True,
            preexec_fn=_parent_death_signal() if die_with_parent else None,
        )
    plane.pids[name] = proc.pid
    plane.logs[name] = log_path
    plane._processes[name] = proc


def _start_etcd(plane: ControlPlane, etcd_bin: Path, die_with_parent: bool) -> str:
    client_port, peer_port = free_port(), free_port()
    client_url, peer_url = f"http://{LOOPBACK}:{client_port}", f"http://{LOOPBACK}:{peer_port}"
    spawn(plane, "etcd", [
        str(etcd_bin),
        "--name=xidpipe-test",
        f"--data-dir={plane.workdir / 'etcd'}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=xidpipe-test={peer_url}",
        "--initial-cluster-state=new",
        "--unsafe-no-fsync",  # throwaway data: durability is not wanted, speed is
        "--log-level=warn",
    ], die_with_parent)
    return client_url


def _start_apiserver(plane: ControlPlane, apiserver_bin: Path, etcd_url: str, port: int,
                     die_with_parent: bool) -> None:
    pki = plane.workdir / "pki"
    spawn(plane, "kube-apiserver", [
        str(apiserver_bin),
        f"--etcd-servers={etcd_url}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        # 1.37 refuses a loopback address for the endpoints of the "kubernetes" Service; nothing
        # in the tests uses that Service, so it is not maintained.
        "--endpoint-reconciler-type=none",
        f"--secure-port={port}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        "--authorization-mode=Node,RBAC",
        f"--token-auth-file={plane.workdir / 'tokens.csv'}",
        "--anonymous-auth=false",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24",
        # As kubeadm and managed clusters run it: privileged containers (the remediation Jobs) are
        # admitted by the API server, and Pod Security admission decides per namespace.
        "--allow-privileged=true",
        "--profiling=false",
        "--v=1",
    ], die_with_parent)


def wait_ready(plane: ControlPlane, name: str, url: str, deadline: float, *, context: ssl.SSLContext | None,
               token: str | None, accept: Callable[[str], bool]) -> None:
    """Poll ``url`` until ``accept(body)``; fail with the log's tail if a process of the plane exits
    or the deadline passes."""
    last = "no answer yet"
    delay = 0.05
    while True:
        for proc_name, alive in plane.alive().items():
            if not alive:
                log = tail(plane.logs[proc_name])
                raise ControlPlaneError(f"{proc_name} exited during start-up:\n{log}")
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as response:
                body = response.read().decode(errors="replace")
            if accept(body):
                return
            last = f"HTTP {response.status}: {body[:200]}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}: {exc.read().decode(errors='replace')[:500]}"
        except (OSError, ssl.SSLError) as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            log = tail(plane.logs[name])
            raise ControlPlaneError(f"{name} not ready at {url} in time; last: {last}\n{log}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log file (what a start-up error shows)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


def _pid_alive(pid: int, proc: subprocess.Popen[bytes] | None) -> bool:
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie we cannot reap (not our child) counts as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _terminate(pid: int, proc: subprocess.Popen[bytes] | None) -> None:
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
        if not _pid_alive(pid, proc):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not _pid_alive(pid, proc):
                return
            time.sleep(0.05)
    if _pid_alive(pid, proc):
        raise ControlPlaneError(f"process {pid} did not exit after SIGKILL")


def _write_kubeconfig(plane: ControlPlane) -> None:
    """A kubeconfig (JSON is valid YAML) with one context per identity; current: admin."""
    write_kubeconfig(plane, plane.kubeconfig, tuple(plane.identities), current="admin")


def write_kubeconfig(plane: ControlPlane, path: Path, identities: tuple[str, ...], current: str) -> None:
    """A kubeconfig at ``path`` with a context per identity (named after it); ``current`` is used."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "xidpipe-test",
                      "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_file)}}],
        "users": [{"name": name, "user": {"token": plane.token(name)}} for name in identities],
        "contexts": [{"name": name, "context": {"cluster": "xidpipe-test", "user": name}} for name in identities],
        "current-context": current,
    }
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)


def stop_workdir(workdir: Path, keep: bool = False) -> None:
    """Stop the control plane whose state is in ``workdir`` (as written by ``start``)."""
    state = json.loads((workdir / STATE_FILE).read_text())
    plane = ControlPlane.from_state(state)
    plane.keep_workdir = keep
    plane.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start", help="start detached; print the work directory and KUBECONFIG")
    p_start.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    p_stop = sub.add_parser("stop", help="stop the control plane started in WORKDIR")
    p_stop.add_argument("workdir", type=Path)
    p_stop.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    p_run = sub.add_parser("run", help="start, wait for Ctrl-C or SIGTERM, stop")
    p_run.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)

    if args.command == "stop":
        stop_workdir(args.workdir, keep=args.keep)
        print(f"stopped {args.workdir}")
        return 0
    began = time.monotonic()
    try:
        plane = start(args.workdir, die_with_parent=args.command == "run")
    except ControlPlaneError as exc:
        print(f"controlplane: {exc}", file=sys.stderr)
        return 1
    print(f"ready in {time.monotonic() - began:.1f}s: {plane.server}")
    pids = ", ".join(f"{name} pid {pid}" for name, pid in plane.pids.items())
    print(f"workdir {plane.workdir} ({pids})")
    print(f"export KUBECONFIG={plane.kubeconfig}   # contexts: admin, worker, nobody")
    if args.command == "start":
        print(f"stop with: {sys.executable} {Path(__file__)} stop {plane.workdir}")
        return 0
    return run_until_stopped(plane)


def run_until_stopped(plane: ControlPlane) -> int:
    """Keep `plane` up until SIGTERM, Ctrl-C or one of its processes exits; then stop it."""
    stop_requested = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    try:
        while not stop_requested and all(plane.alive().values()):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    plane.stop()
    print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
