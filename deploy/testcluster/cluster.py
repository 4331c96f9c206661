"""A test control plane with controllers: kube-scheduler, kube-controller-manager and KWOK's fake
kubelets on top of ``controlplane.py``'s etcd + kube-apiserver, all on loopback.

- **kube-scheduler** (default profile: the DynamicResources plugin allocates ResourceClaims and
  keeps them off devices a DeviceTaintRule taints ``NoSchedule``), as ``system:kube-scheduler``.
- **kube-controller-manager** with the controllers in ``CONTROLLERS`` (Jobs, Deployments and
  ReplicaSets, the garbage collector, disruption budgets, node lifecycle and taint eviction, DRA
  claims and device-taint eviction, namespaces and their default service accounts), as
  ``system:kube-controller-manager`` with one service-account identity per controller
  (``--use-service-account-credentials``), so each controller has exactly its bootstrap RBAC.
- **kwok** managing the nodes annotated ``kwok.x-k8s.io/node=fake``, with the stages of
  ``kwok-stages.yaml``: nodes Ready (keeping the capacity and bootID they were created with),
  pods Running, then Succeeded or Failed by annotation (Job pods succeed), removed when their
  grace period ends; a reboot by annotation ``testcluster.xidpipe.io/boot-id``.

Feature gates are 1.37's defaults (DRA, device taints and DeviceTaintRule on; resource.k8s.io/v1).
No leader election. Each component's log is WORKDIR/<name>.log.

As a script:

    python deploy/testcluster/cluster.py start [--workdir DIR]   # detached; prints DIR and KUBECONFIG
    python deploy/testcluster/cluster.py stop DIR                # stops every process by PID
    python deploy/testcluster/cluster.py run                     # foreground until Ctrl-C

Imported (see tests/cluster.py): ``plane = start_cluster(); ...; plane.stop()``.
"""

from __future__ import annotations

import argparse
import importlib.util
import ssl
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
KWOK_STAGES = HERE / "kwok-stages.yaml"
# The annotation that hands a node to KWOK (KWOK's own convention); other nodes are left alone.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# Setting this node annotation to a new value reboots a KWOK node (kwok-stages.yaml, node-reboot).
BOOT_ID_ANNOTATION = "testcluster.xidpipe.io/boot-id"
# Pod annotations read by kwok-stages.yaml: how a pod's run ends, its exit code, how long it runs, and
# the termination message its container ends with.
OUTCOME_ANNOTATION = "testcluster.xidpipe.io/outcome"
EXIT_CODE_ANNOTATION = "testcluster.xidpipe.io/exit-code"
RUNTIME_ANNOTATION = "testcluster.xidpipe.io/runtime"
TERMINATION_MESSAGE_ANNOTATION = "testcluster.xidpipe.io/termination-message"
# kube-controller-manager's controllers: what Jobs, drains, budgets, node and device taints and
# DRA claims need, and the namespace and service-account housekeeping that tests rely on.
CONTROLLERS = (
    "job-controller",
    "ttl-after-finished-controller",
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "disruption-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "pod-garbage-collector-controller",
    "resourceclaim-controller",
    "device-taint-eviction-controller",
    "namespace-controller",
    "serviceaccount-controller",
)
# The token identities the components run as (name, user, groups). KWOK plays every kubelet: it
# writes node and pod status for many nodes, which no single node identity may, hence masters.
COMPONENT_IDENTITIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("kube-scheduler", "system:kube-scheduler", ()),
    ("kube-controller-manager", "system:kube-controller-manager", ()),
    ("kwok", "kwok", ("system:masters",)),
)
# KWOK's pod IPs (a /10: room for every pod of a large test).
KWOK_POD_CIDR = "10.64.0.1/10"
# A node lease lasts this long without renewal before the node lifecycle controller marks it NotReady.
NODE_LEASE_SECONDS = 40


def load_controlplane() -> ModuleType:
    """``controlplane.py`` beside this file (deploy/testcluster is no package), loaded once under
    the name that alertmanager.py and tests/kube.py use."""
    name = "xidpipe_testcluster_controlplane"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "controlplane.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


cp = load_controlplane()


def start_cluster(
    workdir: Path | None = None,
    *,
    timeout_s: float | None = None,
    die_with_parent: bool = True,
    keep_workdir: bool = False,
) -> Any:
    """Start etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok; return the
    ``ControlPlane`` once each answers its health check. On failure everything started is stopped
    and ControlPlaneError (BinariesMissing when something is not built) says why."""
    names = ("kube-scheduler", "kube-controller-manager", "kwok")
    binaries = dict(zip(names, cp.built_binaries(*names), strict=True))
    timeout_s = cp.DEFAULT_START_TIMEOUT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    plane = cp.start(workdir, timeout_s=timeout_s, die_with_parent=die_with_parent, keep_workdir=keep_workdir,
                     extra_identities=COMPONENT_IDENTITIES)
    try:
        _start_components(plane, binaries, deadline, die_with_parent)
    except BaseException:
        plane.stop()
        raise
    plane.save_state()
    return plane


def _start_components(plane: Any, binaries: dict[str, Path], deadline: float, die_with_parent: bool) -> None:
    ports = {name: cp.free_port() for name in binaries}
    for name in binaries:
        cp.write_kubeconfig(plane, plane.workdir / f"{name}.kubeconfig", (name,), current=name)
    argv = {
        "kube-scheduler": [
            f"--kubeconfig={plane.workdir / 'kube-scheduler.kubeconfig'}",
            f"--bind-address={cp.LOOPBACK}", f"--secure-port={ports['kube-scheduler']}",
            "--leader-elect=false", "--profiling=false", "--v=1",
        ],
        "kube-controller-manager": [
            f"--kubeconfig={plane.workdir / 'kube-controller-manager.kubeconfig'}",
            f"--bind-address={cp.LOOPBACK}", f"--secure-port={ports['kube-controller-manager']}",
            "--leader-elect=false", "--profiling=false", "--use-service-account-credentials=true",
            f"--root-ca-file={plane.ca_file}", f"--controllers={','.join(CONTROLLERS)}", "--v=1",
        ],
        "kwok": [
            f"--kubeconfig={plane.workdir / 'kwok.kubeconfig'}", f"--config={KWOK_STAGES}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={'='.join(KWOK_NODE_ANNOTATION)}",
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}", f"--cidr={KWOK_POD_CIDR}",
            f"--server-address={cp.LOOPBACK}:{ports['kwok']}",
        ],
    }
    for name, binary in binaries.items():
        cp.spawn(plane, name, [str(binary), *argv[name]], die_with_parent)
    # The scheduler and the controller-manager serve HTTPS with a certificate made up in memory.
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    for name in binaries:
        scheme, context = ("http", None) if name == "kwok" else ("https", unverified)
        cp.wait_ready(plane, name, f"{scheme}://{cp.LOOPBACK}:{ports[name]}/healthz", deadline,
                      context=context, token=None, accept=lambda body: body.strip() == "ok")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_start = sub.add_parser("start", help="start detached; print the work directory and KUBECONFIG")
    p_start.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    p_stop = sub.add_parser("stop", help="stop the cluster started in WORKDIR")
    p_stop.add_argument("workdir", type=Path)
    p_stop.add_argument("--keep", action="store_true", help="keep the work directory (logs, data)")
    p_run = sub.add_parser("run", help="start, wait for Ctrl-C or SIGTERM, stop")
    p_run.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)

    if args.command == "stop":
        cp.stop_workdir(args.workdir, keep=args.keep)
        print(f"stopped {args.workdir}")
        return 0
    began = time.monotonic()
    try:
        plane = start_cluster(args.workdir, die_with_parent=args.command == "run")
    except cp.ControlPlaneError as exc:
        print(f"cluster: {exc}", file=sys.stderr)
        return 1
    print(f"ready in {time.monotonic() - began:.1f}s: {plane.server}")
    print(f"workdir {plane.workdir} ({', '.join(f'{n} pid {p}' for n, p in plane.pids.items())})")
    print(f"export KUBECONFIG={plane.kubeconfig}   # contexts: {', '.join(plane.identities)}")
    print(f"KWOK manages nodes annotated {'='.join(KWOK_NODE_ANNOTATION)}")
    if args.command == "start":
        print(f"stop with: {sys.executable} {Path(__file__)} stop {plane.workdir}")
        return 0
    return cp.run_until_stopped(plane)


if __name__ == "__main__":
    sys.exit(main())
