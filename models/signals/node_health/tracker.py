"""The node's GPU view over time, into the `NodeGpuHealth` records the agent publishes: pure (the time
is given), stateful (the agent keeps one).

A record is published when a condition changes (NVML's state, the counts, the driver), at the
heartbeat, and, while a condition is wrong, at every poll for `REPEAT_WRONG_S` after it began (so a
decision with a grace period, such as NVML unresponsive for 30 s, sees it held), then at the
heartbeat again.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from models.signals.node_health.records import NodeGpuHealth

REPEAT_WRONG_S = 300.0

# The conditions, and the fields each is made of: its onset is when any of them last changed.
CONDITIONS: dict[str, tuple[str, ...]] = {
    "nvml": ("nvml", "nvml_error"),
    "gpu_count": ("nvml_count", "nvml_gpus", "pci_gpus", "expected_count"),
    "driver": ("driver_version", "nvml_error", "kernel_release", "module_kernels", "module_signed", "lockdown"),
}


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
    values: dict[str, Hashable] = field(default_factory=dict)
    since: dict[str, datetime] = field(default_factory=dict)
    published_at: datetime | None = None
    wrong_since: datetime | None = None
    sequence: int = 0

    def observe(self, fields: dict[str, Any], now: datetime) -> NodeGpuHealth | None:
        """Take one poll's view (`NodeGpuHealth`'s fields); the record to publish now, or None."""
        changed = False
        for name, keys in CONDITIONS.items():
            value = tuple(_hashable(fields.get(k)) for k in keys)
            if self.values.get(name) != value:
                changed = changed or name in self.values
                self.values[name], self.since[name] = value, now
        bad = wrong(fields)
        self.wrong_since = (self.wrong_since or now) if bad else None
        repeating = bad and self.wrong_since is not None and (now - self.wrong_since).total_seconds() <= REPEAT_WRONG_S
        due = self.published_at is None or (now - self.published_at).total_seconds() >= self.heartbeat_s
        if not (changed or repeating or due):
            return None
        self.published_at = now
        self.sequence += 1
        return NodeGpuHealth(node=self.node, record_id=f"node-health:{int(now.timestamp() * 1000)}:{self.sequence}",
                             observed_at=now, since=dict(self.since), **fields)


def _hashable(value: Any) -> Hashable:
    return tuple(value) if isinstance(value, list | tuple) else value
