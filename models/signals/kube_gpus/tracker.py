"""The cluster's view of each GPU node over time, into the `KubeGpuView` records the responder's watch
publishes: pure (the time is given), stateful (the watch keeps one for all nodes).

A node's view is published when its GPU counts or its device plugin change, and while it is wrong
(allocatable short, the plugin not ready) at every recheck for `REPEAT_WRONG_S` after it went wrong,
then at the heartbeat; a healthy node's unchanged view is not published again
(`models.signals.conditions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from models.signals.conditions import ConditionClock
from models.signals.kube_gpus.allocatable import shortfall
from models.signals.kube_gpus.records import KubeGpuView

CONDITIONS: dict[str, tuple[str, ...]] = {
    "allocatable": ("capacity", "allocatable", "expected", "node_ready"),
    "plugin": ("plugin_pod", "plugin_ready", "plugin_waiting"),
}


def wrong(view: KubeGpuView) -> bool:
    return shortfall(view) is not None or view.plugin_ready is False


@dataclass(slots=True)
class KubeViewTracker:
    heartbeat_s: float = 600.0
    clocks: dict[str, ConditionClock] = field(default_factory=dict)
    sequence: int = 0

    def observe(self, node: str, fields: dict[str, Any], now: datetime) -> KubeGpuView | None:
        """Take one node's view (`KubeGpuView`'s fields); the record to publish now, or None."""
        clock = self.clocks.get(node)
        if clock is None:
            clock = self.clocks[node] = ConditionClock(self.heartbeat_s, heartbeat_healthy=False)
        probe = KubeGpuView(node=node, record_id="", **fields)
        if not clock.observe(fields, CONDITIONS, wrong(probe), now):
            return None
        self.sequence += 1
        return probe.model_copy(update={"record_id": f"kube:{node}:{int(now.timestamp() * 1000)}:{self.sequence}",
                                        "observed_at": now, "since": dict(clock.since)})

    def forget(self, node: str) -> None:
        self.clocks.pop(node, None)

    def wrong_nodes(self) -> list[str]:
        return [n for n, c in self.clocks.items() if c.wrong_since is not None]
