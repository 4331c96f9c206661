"""When a view's conditions began and when to publish it again: shared by the node's and the cluster's
views of a node's GPUs (`models.signals.node_health.tracker`, `models.signals.kube_gpus.tracker`).

A condition is a few fields of the view; its onset (`since`) is when any of them last changed, so a
decision with a grace period (`HealthPolicy`) measures how long it has held. A view is published
when a condition changes, at the heartbeat (`heartbeat_s`; never, when `heartbeat_healthy` is off and
nothing is wrong), and while something is wrong, every time it is observed for `REPEAT_WRONG_S` after
it went wrong (so a grace period sees it held), then at the heartbeat again.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

REPEAT_WRONG_S = 300.0


def _hashable(value: Any) -> Hashable:
    return tuple(value) if isinstance(value, list | tuple) else value


@dataclass(slots=True)
class ConditionClock:
    """One view's conditions and publications (mutable: its tracker's)."""

    heartbeat_s: float = 600.0
    heartbeat_healthy: bool = True
    values: dict[str, Hashable] = field(default_factory=dict)
    since: dict[str, datetime] = field(default_factory=dict)
    published_at: datetime | None = None
    wrong_since: datetime | None = None

    def observe(self, fields: Mapping[str, Any], conditions: Mapping[str, tuple[str, ...]], wrong: bool,
                now: datetime) -> bool:
        """Take one observation; whether to publish it now."""
        changed = False
        for name, keys in conditions.items():
            value = tuple(_hashable(fields.get(k)) for k in keys)
            if self.values.get(name) != value:
                changed = changed or name in self.values
                self.values[name], self.since[name] = value, now
        self.wrong_since = (self.wrong_since or now) if wrong else None
        repeating = self.wrong_since is not None and (now - self.wrong_since).total_seconds() <= REPEAT_WRONG_S
        beat = (wrong or self.heartbeat_healthy) and (
            self.published_at is None or (now - self.published_at).total_seconds() >= self.heartbeat_s)
        if not (changed or repeating or beat):
            return False
        self.published_at = now
        return True
