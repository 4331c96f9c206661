"""The NVML sensor: driver events, the GPU inventory, GPU processes and missing GPUs
(`agents.signals.nvml.watcher`). Its records and their mapping to faults are `models.signals.nvml`.

It uses the NVML caller, reports the GPUs it reads (the kernel path's pre-filter and evidence
collector use them), and triggers evidence for the fault events it sees.
"""

from __future__ import annotations

from agents.settings import AgentSettings
from agents.signals.base import SensorSpec
from agents.signals.nvml.watcher import NvmlSettings, NvmlWatcher


def settings(agent: AgentSettings) -> NvmlSettings | None:
    if not agent.nvml_enabled:
        return None
    return NvmlSettings(
        event_wait_ms=agent.nvml_event_wait_ms,
        inventory_interval_s=agent.inventory_interval_s,
        inventory_check_s=agent.inventory_check_s,
        processes_interval_s=agent.processes_interval_s,
        proc_root=agent.proc_root,
        sysfs_root=agent.sysfs_root,
    )


SENSOR = SensorSpec("nvml", settings, NvmlWatcher, uses=frozenset({"nvml", "gpus", "evidence"}))
