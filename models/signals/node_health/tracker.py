"""The node's GPU view over time, into the `NodeGpuHealth` records the agent publishes: pure (the time
is given), stateful (the agent keeps one).

A record is published when a condition changes (NVML's state, the counts, the driver), at the
heartbeat, and, while the view is wrong, at every poll for `REPEAT_WRONG_S` after it went wrong (so a
decision with a grace period, such as NVML unresponsive for 30 s, sees it held), then at the heartbeat
again (`models.signals.conditions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from models.signals.conditions import REPEAT_WRONG_S, ConditionClock
from models.signals.node_health.records import NodeGpuHealth

# The conditions, and the fields each is made of: its onset is when any of them last changed.
CONDITIONS: dict[str, tuple[str, ...]] = {
    "nvml": ("nvml", "nvml_error"),
    "gpu_count": ("nvml_count", "nvml_gpus", "pci_gpus", "expected_count"),
    "driver": ("driver_version", "nvml_error", "kernel_release", "module_kernels", "module_signed", "lockdown"),
}

__all__ = ["CONDITIONS", "REPEAT_WRONG_S", "NodeTracker", "wrong"]


def wrong(fields: dict[str, Any]) -> bool:
    """Whether the view shows something the checks may report: NVML not answering, or fewer GPUs
    than the bus or the expected count."""
    if fields.get("nvml", "ok") != "ok":
        return True
    count, expected = fields.get("nvml_count"), fields.get("expected_count")
    bus = len(fields.get("pci_gpus") or ())
    return (expected is not None and ((bus and bus < expected) or (count is not None and count < expected))) or \
        (count is not None and bus > count)


@dataclass(slots=True)
class NodeTracker:
    node: str
    heartbeat_s: float = 600.0
    clock: ConditionClock = field(init=False)
    sequence: int = 0

    def __post_init__(self) -> None:
        self.clock = ConditionClock(self.heartbeat_s)

    @property
    def since(self) -> dict[str, datetime]:
        return self.clock.since

    def observe(self, fields: dict[str, Any], now: datetime) -> NodeGpuHealth | None:
        """Take one poll's view (`NodeGpuHealth`'s fields); the record to publish now, or None."""
        if not self.clock.observe(fields, CONDITIONS, wrong(fields), now):
            return None
        self.sequence += 1
        return NodeGpuHealth(node=self.node, record_id=f"node-health:{int(now.timestamp() * 1000)}:{self.sequence}",
                             observed_at=now, since=dict(self.clock.since), **fields)
