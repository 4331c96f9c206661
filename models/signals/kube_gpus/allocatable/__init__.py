"""GPUs that vanish, seen from the cluster: the node's `nvidia.com/gpu` allocatable below its capacity
(the device plugin marked devices unhealthy), or its capacity below the count its labels expect
(devices gone from the plugin's list), held for `allocatable_grace_s` on a Ready node. The
operations guide's section 九 lists "allocatable drops" among the signs of a GPU dropping out.
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.kube_gpus.records import KubeGpuView
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family


def shortfall(rec: KubeGpuView) -> str | None:
    if rec.capacity is None or rec.allocatable is None:
        return None
    if rec.allocatable < rec.capacity:
        return f"{rec.resource} allocatable {rec.allocatable} of capacity {rec.capacity}"
    if rec.expected is not None and rec.capacity < rec.expected:
        return f"{rec.resource} capacity {rec.capacity} of the {rec.expected} the node's labels expect"
    return None


def check(rec: KubeGpuView, policy: HealthPolicy) -> tuple[Finding, ...]:
    what = shortfall(rec) if rec.node_ready else None
    if what is None:
        return ()
    onset = rec.since.get("allocatable", rec.observed_at)
    held = (rec.observed_at - onset).total_seconds()
    if held < policy.allocatable_grace_s:
        return ()
    return (Finding(
        "gpu_allocatable", Family.GPU_LOST, Category.HARDWARE,
        f"{what} for {held:.0f} s (grace {policy.allocatable_grace_s:g} s): GPUs dropped out of the scheduler's view",
        onset, None, None, "GPUs missing from the node's allocatable",
        details={"capacity": rec.capacity, "allocatable": rec.allocatable, "expected": rec.expected}),)
