"""GPU health from NVML: the agent's poller reads each GPU (`agents.signals.health`) and publishes a
`GpuHealth` record on the NVML topic; the stream runs each health check on it with its policy
(`models.stream_policy.HealthPolicy`).

Each check is a folder with one pure decision, `check(record, policy) -> findings`:

| check | finds |
|---|---|
| `remap` | a row remapping pending (reset) or failed (RMA); a page retirement pending, or the page limit |
| `recovery` | a recovery action other than none (field 230): that action |
| `ecc` | a single-bit error rate above the GPU's own baseline (Xid 92's meaning) |
| `nvlink` | a link down; replay/recovery or CRC errors over their thresholds |
| `pcie` | the link below its width, or its generation while busy; replays over their rate |
| `thermal` | hardware slowdown sustained over a window, together with heat or a power limit |

A new check is a folder here and one entry in `CHECKS`. docs/signals.md lists every signal.
"""

from __future__ import annotations

from collections.abc import Callable

from models.incidents import FaultObservation
from models.node_records import NVML_TOPIC
from models.signals.base import decided
from models.signals.finding import Finding, observation
from models.signals.health import ecc, nvlink, pcie, recovery, remap, thermal
from models.signals.health.records import GpuHealth, HealthHistory, HealthReading, LinkReading, NvlinkErrors
from models.stream_policy import HealthPolicy, PipelinePolicy

Check = Callable[[GpuHealth, HealthPolicy], tuple[Finding, ...]]

CHECKS: dict[str, Check] = {
    "remap": remap.check,
    "recovery": recovery.check,
    "ecc": ecc.check,
    "nvlink": nvlink.check,
    "pcie": pcie.check,
    "thermal": thermal.check,
}


def findings(rec: GpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    return tuple(f for check in CHECKS.values() for f in check(rec, policy))


def decide(rec: GpuHealth, policy: PipelinePolicy) -> tuple[FaultObservation, ...]:
    """The faults a GPU's health record shows, by every check, with the stream's policy."""
    return tuple(observation(f, node=rec.node, source="nvml", subject=rec.gpu_uuid, observed_at=rec.observed_at,
                             gpu_uuid=rec.gpu_uuid, pci=rec.pci_bus_id)
                 for f in findings(rec, policy.health))


GPU_HEALTH = decided(GpuHealth, NVML_TOPIC, decide)
SIGNALS = (GPU_HEALTH,)

__all__ = ["CHECKS", "GPU_HEALTH", "SIGNALS", "GpuHealth", "HealthHistory", "HealthReading", "LinkReading",
           "NvlinkErrors", "decide", "findings"]
