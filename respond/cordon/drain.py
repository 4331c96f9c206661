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

from pydantic import BaseModel, Field

from models.cordon import PodRef
from models.cordon_policy import Drain
from respond.cordon.port import PodInfo, PodPort
from respond.errors import ActionError, TemporaryError

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


def skip_reason(pod: PodInfo, node: str) -> str | None:
    """Why the drain leaves this pod alone, or None to evict it."""
    if pod.node_name != node:
        return f"not on node {node}"
    if MIRROR_ANNOTATION in pod.annotations:
        return "mirror (static) pod"
    if "DaemonSet" in pod.owner_kinds:
        return "DaemonSet pod"
    if pod.terminating:
        return "already terminating"
    return None


def _candidates(pods: PodPort, node: str, named: tuple[PodRef, ...], policy: Drain,
                report: DrainReport) -> list[PodInfo]:
    """The pods the incident names (gone ones reported), or the node's GPU pods when the policy says so."""
    candidates: list[PodInfo] = []
    if named:
        for ref in named:
            try:
                pod = pods.read_pod(ref.namespace, ref.name)
            except ActionError as exc:
                report.failed[f"{ref.namespace}/{ref.name}"] = exc.message
                continue
            if pod is None:
                report.gone.append(f"{ref.namespace}/{ref.name}")
            else:
                candidates.append(pod)
    elif policy.unattributed == "gpu_requesting":
        try:
            candidates = [p for p in pods.node_pods(node) if GPU_RESOURCE in p.resources]
        except ActionError as exc:
            report.failed[f"pods on {node}"] = exc.message
    return candidates


def drain_gpu_pods(
    pods: PodPort,
    node: str,
    named: tuple[PodRef, ...],
    policy: Drain,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> DrainReport:
    start = clock()
    deadline = start + policy.deadline_s
    report = DrainReport()
    pending: list[PodInfo] = []
    for pod in _candidates(pods, node, named, policy, report):
        why = skip_reason(pod, node)
        if why is None:
            pending.append(pod)
        else:
            report.skipped[pod.key] = why
    wait = policy.backoff_initial_s
    last_refusal: dict[str, str] = {}
    while pending:
        still: list[PodInfo] = []
        for pod in pending:
            report.attempts += 1
            try:
                (report.evicted if pods.evict(pod, policy.grace_period_s) else report.gone).append(pod.key)
            except TemporaryError as exc:  # 429: a disruption budget allows no disruption now; 5xx
                last_refusal[pod.key] = exc.message
                still.append(pod)
            except ActionError as exc:
                report.failed[pod.key] = exc.message
        pending = still
        if not pending:
            break
        if clock() + wait > deadline:
            break
        log.info("eviction refused, backing off", extra={"node": node, "pods": [p.key for p in pending],
                                                         "wait_s": wait})
        sleep(wait)
        wait = min(policy.backoff_max_s, wait * 2)
    for pod in pending:
        report.blocked[pod.key] = last_refusal.get(pod.key, "eviction refused")
    report.elapsed_s = round(clock() - start, 3)
    return report
