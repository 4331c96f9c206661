"""Evict the pods that use the faulty GPU, through the Eviction API (PodDisruptionBudgets honoured).

Only the pods the incident names (the ones PodResources showed on the faulty GPU) are evicted, or,
when the policy says so and the incident names none, the node's pods that request `nvidia.com/gpu`.
DaemonSet pods and mirror (static) pods are skipped, as `kubectl drain` does. A 429 (a disruption
budget allows no disruption now) is retried with exponential backoff until the policy's deadline
and then reported as blocked: a budget is never bypassed (no delete is ever sent).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import BaseModel, Field

from models.cordon import PodRef
from models.cordon_policy import Drain
from respond.cordon.retry import describe, is_transient

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class DrainReport(BaseModel):
    evicted: list[str] = Field(default_factory=list)
    gone: list[str] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict)
    blocked: dict[str, str] = Field(default_factory=dict)
    failed: dict[str, str] = Field(default_factory=dict)
    attempts: int = 0
    elapsed_s: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.blocked and not self.failed


def _meta(pod: client.V1Pod) -> client.V1ObjectMeta:
    return pod.metadata or client.V1ObjectMeta()


def _key(pod: client.V1Pod) -> str:
    return f"{_meta(pod).namespace}/{_meta(pod).name}"


def skip_reason(pod: client.V1Pod, node: str) -> str | None:
    if pod.spec is None or pod.spec.node_name != node:
        return f"not on node {node}"
    meta = _meta(pod)
    if MIRROR_ANNOTATION in (meta.annotations or {}):
        return "mirror (static) pod"
    if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
        return "DaemonSet pod"
    if meta.deletion_timestamp is not None:
        return "already terminating"
    return None


def _requests_gpu(pod: client.V1Pod) -> bool:
    for c in (pod.spec.containers or []) if pod.spec else []:
        res = c.resources
        if res and ((res.limits or {}).get(GPU_RESOURCE) or (res.requests or {}).get(GPU_RESOURCE)):
            return True
    return False


def drain_gpu_pods(
    core: client.CoreV1Api,
    node: str,
    pods: tuple[PodRef, ...],
    policy: Drain,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> DrainReport:
    start = clock()
    deadline = start + policy.deadline_s
    report = DrainReport()
    candidates: list[client.V1Pod] = []
    if pods:
        for ref in pods:
            try:
                candidates.append(core.read_namespaced_pod(ref.name, ref.namespace))
            except ApiException as exc:
                if exc.status == 404:
                    report.gone.append(f"{ref.namespace}/{ref.name}")
                else:
                    report.failed[f"{ref.namespace}/{ref.name}"] = describe(exc)
    elif policy.unattributed == "gpu_requesting":
        try:
            listed = core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")
        except ApiException as exc:
            report.failed[f"pods on {node}"] = describe(exc)
        else:
            candidates = [p for p in listed.items if _requests_gpu(p)]
    pending: list[client.V1Pod] = []
    for pod in candidates:
        why = skip_reason(pod, node)
        if why is None:
            pending.append(pod)
        else:
            report.skipped[_key(pod)] = why
    wait = policy.backoff_initial_s
    last_refusal: dict[str, str] = {}
    while pending:
        still: list[client.V1Pod] = []
        for pod in pending:
            report.attempts += 1
            outcome = _evict(core, pod, policy.grace_period_s)
            if outcome == "evicted":
                report.evicted.append(_key(pod))
            elif outcome == "gone":
                report.gone.append(_key(pod))
            elif isinstance(outcome, tuple):
                status, message = outcome
                if status == 429 or is_transient(ApiException(status=status)):
                    last_refusal[_key(pod)] = message
                    still.append(pod)
                else:
                    report.failed[_key(pod)] = message
        pending = still
        if not pending:
            break
        if clock() + wait > deadline:
            break
        log.info("eviction refused, backing off", extra={"node": node, "pods": [_key(p) for p in pending],
                                                         "wait_s": wait})
        sleep(wait)
        wait = min(policy.backoff_max_s, wait * 2)
    for pod in pending:
        report.blocked[_key(pod)] = last_refusal.get(_key(pod), "eviction refused")
    report.elapsed_s = round(clock() - start, 3)
    return report


def _evict(core: client.CoreV1Api, pod: client.V1Pod, grace: int | None) -> str | tuple[int, str]:
    name, namespace = str(_meta(pod).name), str(_meta(pod).namespace)
    options = client.V1DeleteOptions(grace_period_seconds=grace) if grace is not None else None
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace), delete_options=options)
    try:
        core.create_namespaced_pod_eviction(name, namespace, body)
    except ApiException as exc:
        if exc.status == 404:
            return "gone"
        return int(exc.status or 0), describe(exc)
    except Exception as exc:
        if is_transient(exc):
            return 503, describe(exc)
        raise
    return "evicted"

