"""The agent's DaemonSet, as the Helm chart renders it by default, keeps to least privilege (a
reviewer's checklist, as a test)."""

import subprocess
from typing import Any

import yaml

from tests.kube import CHART, helm_binary


def _daemonset() -> dict[str, Any]:
    cmd = [helm_binary(), "template", "xidpipe", str(CHART), "--namespace", "xidpipe",
           "--show-only", "templates/agent.yaml"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return next(d for d in docs if d["kind"] == "DaemonSet")


def test_least_privilege() -> None:
    pod = _daemonset()["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    sc = agent["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]}
    assert not pod.get("hostPID") and not pod.get("hostNetwork") and pod["automountServiceAccountToken"] is False
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    writable = {name for name, m in mounts.items() if not m.get("readOnly")}
    assert writable == {"state", "tmp"}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    # Only what the sources read: the kernel log (kmsg, the journal), PodResources, the host's pids, the
    # kernels' modules (which kernel the driver is built for); never the whole of /var/log (other services'
    # logs, secrets some of them write there).
    assert host == {
        "kmsg": "/dev/kmsg", "journal-persistent": "/var/log/journal", "journal-volatile": "/run/log/journal",
        "machine-id": "/etc/machine-id", "pod-resources": "/var/lib/kubelet/pod-resources", "host-proc": "/proc",
        "host-modules": "/lib/modules", "state": "/var/lib/xidpipe-agent",
    }
    assert sc["runAsUser"] == 0 and "runAsNonRoot" not in sc  # why: the comment beside it (PodResources, kmsg)


def test_node_identity_gpu_scheduling_and_resources() -> None:
    pod = _daemonset()["spec"]["template"]["spec"]
    (agent,) = pod["containers"]
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert pod["runtimeClassName"] == "nvidia" or env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert agent["resources"]["requests"] and agent["resources"]["limits"]["memory"]
    assert "secretKeyRef" in env["XIDPIPE_AGENT_SASL_PASSWORD"]["valueFrom"]
