"""The cluster as the remediation loop sees it: one port, implemented on the Kubernetes API by
`respond.remediation.kube_jobs.KubeRemediation`. Every method raises `respond.errors.TemporaryError`
or `PermanentError` (transient failures already retried within the adapter's deadline)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from models.cordon import PodRef
from models.remediation_loop import JobState, NodeState
from respond.cordon.port import NodeRead
from respond.cordon.steps.drain import PodInfo


@runtime_checkable
class LoopCluster(Protocol):
    namespace: str

    def node_state(self, name: str) -> tuple[NodeState, NodeRead]:
        """The node as the loop looks at it (boot ID, Ready, whose cordon), and as the cordon reads it."""
        ...

    def node_states(self) -> dict[str, NodeState]:
        """Every node, read at once (a pass over many loops)."""
        ...

    def annotate(self, name: str, annotations: dict[str, str]) -> None:
        """Set xidpipe.io/ annotations of the node (the hand-off request, the loop's stage)."""
        ...

    def set_node_condition(self, name: str, kind: str, status: str, reason: str, message: str, at: datetime) -> bool:
        ...

    def pool_size(self, key: str, pool: str) -> int:
        """The nodes of the pool (label `key` = `pool`; nodes without it when `pool` is '')."""
        ...

    def create_job(self, manifest: dict[str, Any]) -> str:
        """'created', or 'exists' when a Job of that name is there already."""
        ...

    def job_state(self, name: str) -> JobState:
        ...

    def delete_job(self, name: str) -> None:
        ...

    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        ...

    def node_pods(self, node: str) -> list[PodInfo]:
        ...

    def evict(self, pod: PodInfo, grace_period_s: int | None) -> bool:
        ...

    def cluster_evidence(self, node: str, pods: tuple[PodRef, ...]) -> list[dict[str, Any]]:
        ...
