"""The NVML sensor: driver events, the GPU inventory and GPU processes (`agents.signals.nvml.watcher`)."""

from __future__ import annotations

from agents.signals.base import Sensor, SensorContext, SensorSpec


def build(ctx: SensorContext) -> Sensor | None:
    settings = ctx.settings
    if not settings.nvml_enabled:
        return None
    from agents.signals.nvml.watcher import NvmlWatcher

    evidence = ctx.agent.evidence
    watcher = NvmlWatcher(
        node=settings.node,
        publish=ctx.publish,
        metrics=ctx.metrics,
        call_timeout_s=settings.nvml_call_timeout_s,
        event_wait_ms=settings.nvml_event_wait_ms,
        inventory_interval_s=settings.inventory_interval_s,
        inventory_check_s=settings.inventory_check_s,
        processes_interval_s=settings.processes_interval_s,
        proc_root=settings.proc_root,
        sysfs_root=settings.sysfs_root,
        on_gpu_addresses=ctx.agent.prefilter.set_gpu_pci_addresses,
        on_fault=evidence.on_nvml_fault if evidence is not None else None,
    )
    if evidence is not None:
        evidence.set_gpu_lookup(watcher.gpu_for_bus)
    return watcher


SENSOR = SensorSpec("nvml", build)
