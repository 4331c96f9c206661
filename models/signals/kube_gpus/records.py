"""The cluster's view of a node's GPUs: `KubeGpuView`, one record per node on the kube topic, written by
the responder's watch of the nodes and of the device plugin's pods (`respond/gpu_watch.py`) when the
view changes, and again at its recheck interval while something is wrong.

It holds the node's `nvidia.com/gpu` capacity and allocatable, the count its labels expect (GPU
Feature Discovery's `nvidia.com/gpu.count`, or the label the responder is told), whether the node is
Ready, and the device plugin's pod on the node: ready or not, its restarts, why it waits.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import Field

from models.node_records import NodeRecordBase


def _now() -> datetime:
    return datetime.now(UTC)


class KubeGpuView(NodeRecordBase):
    kind: Literal["kube_gpu_view"] = "kube_gpu_view"
    observed_at: datetime = Field(default_factory=_now)
    node_ready: bool = True
    resource: str = "nvidia.com/gpu"
    capacity: int | None = None
    allocatable: int | None = None
    expected: int | None = Field(default=None, description="the GPU count the node's labels name")
    plugin_pod: str | None = Field(default=None, description="namespace/name of the device plugin's pod on the node")
    plugin_ready: bool | None = None
    plugin_restarts: int | None = None
    plugin_waiting: str | None = Field(default=None, description="why a container waits (CrashLoopBackOff, ...)")
    since: dict[str, datetime] = Field(
        default_factory=dict, description="when each condition began: `allocatable` (the current capacity and "
        "allocatable), `plugin` (the pod's current readiness)")
