"""What a remediation loop creates in the cluster, as plain values: its Jobs (a GPU reset, a node
reboot, an `nvidia-bug-report.sh` run, the DCGM validation) and its hand-off requests.

Every Job is pinned to its node (node affinity on `metadata.name`, so the scheduler places it and
counts it), tolerates xidpipe's taint and the cordon, runs once (`backoffLimit: 0`) within its
deadline, under a ServiceAccount with no API rights and no token, and is named after its
idempotency key: the loop, the Job's kind and its attempt. A create that finds the name taken is
the same Job, created before a crash.

A Job says what it found in its termination message (`/dev/termination-log`, at most 4096 bytes
kept by the kubelet): the validation Job's `dcgmi diag -j` output gzip-compressed and base64-encoded,
the bug report Job's summary (path, size, SHA-256 of the report left on the node).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from models.cordon import TAINT_KEY
from models.remediation_policy import JobTemplate

JobKind = Literal["reset_gpu", "reboot_node", "bug_report", "validation"]
_SHORT: dict[str, str] = {"reset_gpu": "reset", "reboot_node": "reboot", "bug_report": "bugreport",
                          "validation": "validate"}
LABEL_MANAGED = "app.kubernetes.io/managed-by"
LABEL_KIND = "xidpipe.io/remediation"
LABEL_LOOP = "xidpipe.io/remediation-loop"
ANN_NODE = "xidpipe.io/node"
ANN_INCIDENT = "xidpipe.io/incident"
ANN_LOOP = "xidpipe.io/remediation-loop"
ANN_HANDOFF_REQUEST = "xidpipe.io/remediation-request"  # on the node: what the site's tooling is asked to do
ANN_HANDOFF_RESULT = "xidpipe.io/remediation-result"  # on the node, by the site's tooling: "<key>=succeeded|failed"
ANN_STAGE = "xidpipe.io/remediation-stage"  # on the node: the loop's stage, for kubectl
CONDITION_TYPE = "GPURemediation"  # the node condition that shows the loop (kubectl describe node)
MESSAGE_MAX = 4096  # what the kubelet keeps of a termination message
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def loop_id(node: str, incident_id: str, cordoned_at: str) -> str:
    """A loop's id: one per cordon of a node for an incident (a label value: at most 63 characters)."""
    digest = hashlib.sha256(f"{node}\x1f{incident_id}\x1f{cordoned_at}".encode()).hexdigest()[:20]
    return f"rl-{digest}"


def job_name(loop: str, kind: JobKind, seq: int) -> str:
    """The Job's name and idempotency key: its loop, kind and attempt."""
    digest = hashlib.sha256(f"{loop}\x1f{kind}\x1f{seq}".encode()).hexdigest()[:16]
    return f"xidpipe-{_SHORT[kind]}-{digest}"


@dataclass(frozen=True, slots=True)
class JobParams:
    node: str
    gpu: str  # the GPU UUID ("" for a node-level fault)
    pci: str
    key: str  # the Job's name, unique per run (file names of what it leaves on the node)
    level: int = 2


def _command(template: JobTemplate, p: JobParams) -> list[str]:
    return [part.format(gpu=p.gpu, pci=p.pci, node=p.node, level=p.level, key=p.key) for part in template.command]


def job_manifest(kind: JobKind, template: JobTemplate, p: JobParams, *, namespace: str, service_account: str,
                 loop: str, incident_id: str, deadline_s: float, ttl_s: int) -> dict[str, Any]:
    """The Job (batch/v1, as JSON) that runs `kind` on node `p.node`."""
    labels = {LABEL_MANAGED: "xidpipe", LABEL_KIND: _SHORT[kind], LABEL_LOOP: loop}
    annotations = {ANN_NODE: p.node, ANN_INCIDENT: incident_id, ANN_LOOP: loop}
    container: dict[str, Any] = {
        "name": _SHORT[kind], "image": template.image, "command": _command(template, p),
        "securityContext": {"privileged": template.privileged},
        "terminationMessagePolicy": "File",
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "XIDPIPE_GPU", "value": p.gpu}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [p.node]}]}]}}},
        "tolerations": [
            {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
            {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        ],
        "containers": [container],
    }
    if template.host_pid:
        pod["hostPID"] = True
    if template.host_root:
        pod["volumes"] = [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}]
        container["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    if template.runtime_class:
        pod["runtimeClassName"] = template.runtime_class
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": p.key, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": max(1, int(deadline_s)),
            "ttlSecondsAfterFinished": ttl_s,
            "template": {"metadata": {"labels": labels, "annotations": {**annotations, **template.pod_annotations}},
                         "spec": pod},
        },
    }


# --- what a Job says ----------------------------------------------------------------------------------


def termination_text(message: str | None) -> str:
    """A termination message as text: gzip+base64 decoded when it is that (the validation Job's), else as is."""
    text = (message or "").strip()
    if text.startswith("H4sI"):  # base64 of gzip's magic number
        try:
            return gzip.decompress(base64.b64decode(text, validate=True)).decode("utf-8", "replace")
        except (binascii.Error, OSError, EOFError, ValueError):
            return text
    return text


def encode_termination(text: str) -> str:
    """What the validation Job writes: `text` gzip-compressed and base64-encoded."""
    return base64.b64encode(gzip.compress(text.encode())).decode()


@dataclass(frozen=True, slots=True)
class BugReport:
    path: str
    bytes: int
    sha256: str


def bug_report_of(message: str | None) -> BugReport | None:
    """The bug report Job's summary (its termination message), or None when it wrote none that reads."""
    try:
        data = json.loads(termination_text(message))
        return BugReport(path=str(data["path"]), bytes=int(data["bytes"]), sha256=str(data["sha256"]))
    except (ValueError, KeyError, TypeError):
        return None


# --- the hand-off ------------------------------------------------------------------------------------


def handoff_request(key: str, remedy: str, node: str, gpu: str, incident_id: str, at: datetime) -> str:
    """The request the site's tooling reads (a node annotation, the webhook's body): JSON."""
    return json.dumps({"key": key, "action": remedy, "node": node, "gpu": gpu, "incident": incident_id,
                       "requested_at": at.isoformat(),
                       "reply": f"annotate the node {ANN_HANDOFF_RESULT}={key}=succeeded (or =failed:<why>); "
                                "a reboot is confirmed by the node's boot ID changing"}, sort_keys=True)


def handoff_result(annotation: str | None, key: str) -> tuple[Literal["succeeded", "failed"], str] | None:
    """What the site's tooling answered for `key` (`<key>=succeeded` or `<key>=failed[:why]`), or None."""
    if not annotation or not annotation.startswith(f"{key}="):
        return None
    verdict, _, why = annotation[len(key) + 1:].partition(":")
    if verdict == "succeeded":
        return "succeeded", why.strip() or "the site's tooling reported success"
    if verdict == "failed":
        return "failed", why.strip() or "the site's tooling reported failure"
    return None
