"""What the cordon executor and the drain need from the cluster: `NodePort`, in plain values.

`kube_nodes.KubeNodes` implements it on the Kubernetes API. Every method raises
`respond.errors.PermanentError` or `TemporaryError` (transient failures already retried within
the adapter's deadline), and the guarded writes `Conflict` when the node changed since it was read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from models.cordon import CordonDecision, CordonRequest, FleetView, NodeView
from models.cordon_policy import CordonPolicy


class Conflict(Exception):
    """The node changed between read and write (resourceVersion moved): read again and retry."""


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """The node's `GPUHealthy` condition as it stands."""

    status: str
    reason: str | None = None
    message: str | None = None
    last_transition: datetime | None = None


@dataclass(slots=True)
class NodeRead:
    """A node as read: the view the decisions take, and what a guarded write of it needs."""

    view: NodeView
    resource_version: str | None = None
    taints: list[dict[str, Any]] = field(default_factory=list)
    condition: NodeCondition | None = None


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


class NodePort(PodPort, Protocol):
    """Node reads and writes, each safe to repeat."""

    def read(self, name: str) -> NodeRead:
        """The node; `view.exists` is False when there is none."""
        ...

    def fleet_view(self, policy: CordonPolicy, labels: dict[str, str], cordons_last_hour: int,
                   fresh_as_of: int = 0) -> FleetView:
        """The node's pool: its size and how many of its nodes xidpipe holds cordoned now, counting
        every node write up to the resourceVersion `fresh_as_of` (the newest cordon in the action record)."""
        ...

    def apply_cordon(self, current: NodeRead, req: CordonRequest, decision: CordonDecision,
                     at: datetime) -> tuple[list[str], NodeRead]:
        """Cordon, taint and claim the node in one write guarded by `current`; what changed and the node written."""
        ...

    def apply_release(self, current: NodeRead, *, by: str, reason: str, at: datetime) -> list[str]:
        """Lift xidpipe's cordon and taint in one write guarded by `current`, recording who released and why."""
        ...

    def record_repeat(self, name: str, count: int) -> None:
        """Record the incident's occurrence count on the node."""
        ...

    def set_condition(self, name: str, status: str, reason: str, message: str, at: datetime,
                      existing: NodeCondition | None) -> bool:
        """Set the `GPUHealthy` condition unless `existing` says the same already; whether it changed."""
        ...

    def emit_event(self, name: str, *, key: str, kind: str, action: str, reason: str, note: str,
                   at: datetime, event_type: str = "Warning") -> str:
        """The Event for (node, key, kind), once: 'created', or 'exists' on a redelivery."""
        ...

    def event_series(self, name: str, req: CordonRequest, at: datetime, note: str) -> str:
        """A repeat of the incident on its cordon Event: 'series', or what `emit_event` says when it expired."""
        ...
