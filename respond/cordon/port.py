"""The cluster as the cordon executor and its steps see it: plain values, and the executor's own ports.

The ports are narrow, one per user: the executor reads nodes (`NodeReader`) and counts a node's pool
(`PoolCounter`); a release lifts a cordon (`ReleaseWriter`, with the condition and Event ports of
the steps); each step after the decision declares the port it needs in its own module
(`respond.cordon.steps`: `CordonWriter`, `RepeatWriter`, `ConditionWriter`, `EventWriter`,
`PodPort`). `kube_nodes.KubeNodes` implements all of them on the Kubernetes API. Every method raises
`respond.errors.PermanentError` or `TemporaryError` (transient failures already retried within the
adapter's deadline), the guarded writes `Conflict` when the node changed since it was read, and every
write `respond.errors.Fenced` when the adapter's `WriteFence` refused it (nothing was sent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from models.cordon import FleetView, NodeView
from models.cordon_policy import CordonPolicy
from models.leader_election import WriteVerdict


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


@runtime_checkable
class NodeReader(Protocol):
    def read(self, name: str) -> NodeRead:
        """The node; `view.exists` is False when there is none."""
        ...


@runtime_checkable
class PoolCounter(Protocol):
    def fleet_view(self, policy: CordonPolicy, labels: dict[str, str], cordons_last_hour: int,
                   fresh_as_of: int = 0) -> FleetView:
        """The node's pool: its size and how many of its nodes xidpipe holds cordoned now, counting
        every node write up to the resourceVersion `fresh_as_of` (the newest cordon in the action record)."""
        ...


@runtime_checkable
class ReleaseWriter(Protocol):
    def apply_release(self, current: NodeRead, *, by: str, reason: str, at: datetime) -> list[str]:
        """Lift xidpipe's cordon and taint in one write guarded by `current`, recording who released and why."""
        ...


class WriteFence(Protocol):
    """What the node adapter asks right before each cluster write it sends (each attempt): whether this
    replica may write now (`respond.leader.LeaderElector.check_write`: it still holds the Lease it
    last renewed, within the renew deadline)."""

    def check_write(self) -> WriteVerdict: ...
