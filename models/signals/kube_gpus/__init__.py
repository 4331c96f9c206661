"""The cluster's view of a node's GPUs (`KubeGpuView`, written by the responder's watch on the kube
topic). One check per folder, each a pure decision with the stream's policy:

| check | finds |
|---|---|
| `allocatable` | `nvidia.com/gpu` allocatable below capacity, or capacity below the expected count |
| `device_plugin` | the device plugin's pod crash-looping, or not ready for a while |

Both are faults of the node (`source` kube); they join the GPU or driver fault of the node they
come with (`models.identity`: the vanished-GPU reports).
"""

from __future__ import annotations

from collections.abc import Callable

from models.incidents import FaultObservation
from models.node_records import KUBE_TOPIC
from models.signals.base import decided
from models.signals.finding import Finding, observation
from models.signals.kube_gpus import allocatable, device_plugin
from models.signals.kube_gpus.records import KubeGpuView
from models.stream_policy import HealthPolicy, PipelinePolicy

Check = Callable[[KubeGpuView, HealthPolicy], tuple[Finding, ...]]

CHECKS: dict[str, Check] = {
    "allocatable": allocatable.check,
    "device_plugin": device_plugin.check,
}


def decide(rec: KubeGpuView, policy: PipelinePolicy) -> tuple[FaultObservation, ...]:
    return tuple(observation(f, node=rec.node, source="kube", subject=rec.node, observed_at=rec.observed_at)
                 for check in CHECKS.values() for f in check(rec, policy.health))


KUBE_GPU_VIEW = decided(KubeGpuView, KUBE_TOPIC, decide)
SIGNALS = (KUBE_GPU_VIEW,)

__all__ = ["CHECKS", "KUBE_GPU_VIEW", "SIGNALS", "KubeGpuView", "decide"]
