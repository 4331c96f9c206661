"""The drain: evict the pods that use the faulty GPU, through the Eviction API (PodDisruptionBudgets
honoured), after a fresh cordon, when the policy's `drain.enabled` says so.

An eviction the node adapter's fence refused (`respond.errors.Fenced`: this replica no longer leads)
ends the drain at once: the step raises it, and the plan's record says `fenced`.

Only the pods the incident names (the ones PodResources showed on the faulty GPU) are evicted, or,
when the policy says so and the incident names none, the node's pods that request `nvidia.com/gpu`.
DaemonSet pods and mirror (static) pods are skipped, as `kubectl drain` does. A 429 (a disruption
budget allows no disruption now) is retried with exponential backoff until the policy's deadline
and then reported as blocked: a budget is never bypassed (no delete is ever sent).

Its record is its own, `evict` (the action kind it always had): outcome `done` when every pod was
evicted or gone, `blocked` when a budget held one past the deadline, `failed` otherwise; the
`DrainReport` in its details.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from models.cordon import CordonRequest, PodRef
from models.cordon_policy import CordonPolicy, Drain
from respond.cordon.steps.base import Phase, StepContext, StepOutcome, StepRecord, Trigger
from respond.errors import ActionError, Fenced, TemporaryError

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
REASON_MAX = 2000


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod, as far as the drain looks at it."""

    namespace: str
    name: str
    node_name: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    owner_kinds: tuple[str, ...] = ()
    terminating: bool = False
    resources: frozenset[str] = frozenset()  # what its containers request or limit (`nvidia.com/gpu`, ...)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@runtime_checkable
class PodPort(Protocol):
    """The node's pods, and their eviction; single attempts (the drain keeps its own backoff)."""

    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        """The pod, or None when it no longer exists."""
        ...

    def node_pods(self, node: str) -> list[PodInfo]:
        """The pods bound to `node` that have not finished (neither Succeeded nor Failed)."""
        ...

    def evict(self, pod: PodInfo, grace_period_s: int | None) -> bool:
        """Evict through the Eviction API (disruption budgets honoured); False when the pod is gone.
        A refusal is a `TemporaryError` (429: a budget allows no disruption now, 5xx) or a `PermanentError`."""
        ...


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
            except Fenced:
                raise  # this replica may not write: the drain ends here, for the leader to complete
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


class DrainStep:
    name = "evict"
    port = PodPort
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"cordon"})  # once, after the cordon: not on its redeliveries
    own_record = True

    def idempotency_key(self, req: CordonRequest) -> str:
        """The incident's pods on the node: an eviction of a pod already gone is reported `gone`."""
        return f"{req.node}/{req.incident_id}"

    def applies(self, policy: CordonPolicy) -> bool:
        return policy.drain.enabled

    def run(self, port: PodPort, ctx: StepContext) -> StepRecord:
        report = drain_gpu_pods(port, ctx.req.node, ctx.req.pods, ctx.policy.drain)
        outcome: StepOutcome = "done" if report.complete else ("blocked" if report.blocked else "failed")
        reason = (f"evicted {len(report.evicted)}, gone {len(report.gone)}, skipped {len(report.skipped)}, "
                  f"blocked {len(report.blocked)}, failed {len(report.failed)}")
        if report.blocked:
            reason += f"; blocked: {'; '.join(f'{k}: {v}' for k, v in report.blocked.items())}"
        return StepRecord(step=self.name, outcome=outcome, reason=reason[:REASON_MAX],
                          key=self.idempotency_key(ctx.req), details=report.model_dump())


STEP = DrainStep()
