"""The node's GPUs as a whole (`NodeGpuHealth`): NVML answering, the count against the bus and the
expected count, the driver loaded. One check per folder, each a pure decision with the stream's policy:

| check | finds |
|---|---|
| `nvml_stall` | NVML calls timing out for `nvml_unresponsive_s`: the driver is hung |
| `gpu_count` | fewer GPUs on the bus than expected, or in NVML than on the bus |
| `driver_load` | GPUs on the bus and no driver: which kernel and driver disagree, or the lockdown |
"""

from __future__ import annotations

from collections.abc import Callable

from models.incidents import FaultObservation
from models.node_records import NVML_TOPIC
from models.pci import normalize_pci
from models.signals.base import decided
from models.signals.finding import Finding, observation
from models.signals.node_health import driver_load, gpu_count, nvml_stall
from models.signals.node_health.records import NodeGpuHealth
from models.stream_policy import HealthPolicy, PipelinePolicy

Check = Callable[[NodeGpuHealth, HealthPolicy], tuple[Finding, ...]]

CHECKS: dict[str, Check] = {
    "nvml_stall": nvml_stall.check,
    "gpu_count": gpu_count.check,
    "driver_load": driver_load.check,
}


def decide(rec: NodeGpuHealth, policy: PipelinePolicy) -> tuple[FaultObservation, ...]:
    out = []
    for check in CHECKS.values():
        for f in check(rec, policy.health):
            gone = f.details.get("missing") if f.kind == "gpu_count" else None
            pci = normalize_pci(gone[0]) if isinstance(gone, list) and len(gone) == 1 else None
            out.append(observation(f, node=rec.node, source="nvml", subject=pci or rec.node,
                                   observed_at=rec.observed_at, pci=pci))
    return tuple(out)


NODE_GPU_HEALTH = decided(NodeGpuHealth, NVML_TOPIC, decide)
SIGNALS = (NODE_GPU_HEALTH,)

__all__ = ["CHECKS", "NODE_GPU_HEALTH", "SIGNALS", "NodeGpuHealth", "decide"]
