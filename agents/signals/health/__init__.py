"""The GPU health sensor: each GPU's health through NVML, and the node's view of its GPUs and driver,
polled in a thread of its own every `health_interval_s` (`agents.signals.health.poller`). Its records
and checks are `models.signals.health` (one GPU) and `models.signals.node_health` (the node).

It uses the NVML caller (every call with the agent's timeout) and nothing else of the agent.
"""

from __future__ import annotations

from agents.settings import AgentSettings
from agents.signals.base import SensorSpec
from agents.signals.health.poller import HealthPoller, HealthSettings

STATE_FILE = "gpu-health.json"


def settings(agent: AgentSettings) -> HealthSettings | None:
    if not (agent.nvml_enabled and agent.health_enabled):
        return None
    return HealthSettings(
        interval_s=agent.health_interval_s,
        heartbeat_s=agent.health_heartbeat_s,
        expected_gpus=agent.expected_gpus,
        proc_root=agent.proc_root,
        sysfs_root=agent.sysfs_root,
        modules_root=agent.modules_root,
        state_file=agent.state_dir / STATE_FILE,
    )


SENSOR = SensorSpec("health", settings, HealthPoller, uses=frozenset({"nvml"}))
