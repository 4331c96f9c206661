"""When the agent publishes a GPU's health: on a change, after a minute with activity, at a heartbeat.

Never per poll: a flat GPU is published once per heartbeat. A change of a state condition
(`models.signals.health.episodes.STATES`: the recovery action, a remapping, a link, the PCIe width,
...) is published at the poll that saw it; counters, clock-event reasons and link generation are
judged by the minute, so a closed minute with activity (`episodes.activities`) is published when it
closes, and a minute that ends an activity's episode too.
"""

from __future__ import annotations

from typing import Literal

Reason = Literal["change", "minute", "heartbeat", "first"]


def publish_reason(*, first: bool, states_changed: bool, minute_active: bool, since_published_s: float,
                   heartbeat_s: float) -> Reason | None:
    """Why this poll publishes the GPU's record, or None."""
    if first:
        return "first"
    if states_changed:
        return "change"
    if minute_active:
        return "minute"
    if since_published_s >= heartbeat_s:
        return "heartbeat"
    return None
