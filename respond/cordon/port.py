"""The cluster as the cordon executor and its steps see it: plain values, and the executor's own ports.

The ports are narrow, one per user: the executor reads nodes (`NodeReader`), counts a node's pool
(`PoolCounter`) and finds the incident's GPU among the DRA devices (`DeviceReader`); a release lifts
a cordon (`ReleaseWriter`, with the condition and Event ports of the steps); each step after the
decision declares the port it needs in its own module (`respond.cordon.steps`: `CordonWriter`,
`RepeatWriter`, `ConditionWriter`, `EventWriter`, `PodPort`, `QuarantineWriter`,
`QuarantineConditionWriter`). `kube_nodes.KubeNodes` implements the node's on the Kubernetes API,
`respond.quarantine.kube_cluster.KubeCluster` all of them (the GPU's DRA device and its
DeviceTaintRule too). Every method raises
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
from models.quarantine import GpuView


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
                   fresh_as_of: int = 0, *, node: str = "", quarantines_as_of: int | None = None) -> FleetView:
        """The node's pool: its size and how many of its nodes xidpipe holds cordoned now, counting
        every node write up to the resourceVersion `fresh_as_of` (the newest cordon in the action record);
        with `quarantines_as_of` (the newest quarantine's rule version), the pool's GPUs and xidpipe's
        quarantines among them, and whether `node` is held already."""
        ...


@runtime_checkable
class DeviceReader(Protocol):
    def gpu_view(self, node: str, uuid: str, policy: CordonPolicy) -> GpuView:
        """The incident's GPU as a DRA device of its node, with xidpipe's rule of it; unresolved (with
        the reason) when it is none."""
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
