"""Compose the agent from its settings: the kernel path always, the side paths when enabled."""

from __future__ import annotations

import logging

from agents.runtime import Agent
from agents.settings import AgentSettings
from models.node_records import NodeRecord

log = logging.getLogger(__name__)

# State snapshots are republished periodically, so a full spool may drop them; events may not.
DROPPABLE_KINDS = frozenset({"inventory", "gpu_processes", "pod_assignments"})


def build_agent(settings: AgentSettings) -> Agent:
    agent = Agent(settings)

    def publish(record: NodeRecord) -> None:
        agent.publish(record, fault=record.kind not in DROPPABLE_KINDS)

    if settings.evidence_enabled:
        from agents.evidence import EvidenceCollector

        agent.evidence = EvidenceCollector.from_settings(settings, publish=publish, metrics=agent.metrics)
    if settings.nvml_enabled:
        from agents.nvml.watcher import NvmlWatcher

        watcher = NvmlWatcher(
            node=settings.node,
            publish=publish,
            metrics=agent.metrics,
            call_timeout_s=settings.nvml_call_timeout_s,
            event_wait_ms=settings.nvml_event_wait_ms,
            inventory_interval_s=settings.inventory_interval_s,
            inventory_check_s=settings.inventory_check_s,
            processes_interval_s=settings.processes_interval_s,
            proc_root=settings.proc_root,
            sysfs_root=settings.sysfs_root,
            on_gpu_addresses=agent.prefilter.set_gpu_pci_addresses,
            on_fault=agent.evidence.on_nvml_fault if agent.evidence is not None else None,
        )
        agent.add_side_path(watcher)
        if agent.evidence is not None:
            agent.evidence.set_gpu_lookup(watcher.gpu_for_bus)
    if settings.podresources_enabled:
        from agents.podresources.watcher import PodResourcesWatcher

        agent.add_side_path(PodResourcesWatcher(
            node=settings.node,
            socket_path=settings.podresources_socket,
            publish=publish,
            metrics=agent.metrics,
            interval_s=settings.podresources_interval_s,
            timeout_s=settings.podresources_timeout_s,
            resource_prefixes=settings.gpu_resource_prefixes,
        ))
    log.info("agent starting", extra={"node": settings.node, "source": settings.source,
                                      "bootstrap": settings.bootstrap_servers, "nvml": settings.nvml_enabled,
                                      "podresources": settings.podresources_enabled,
                                      "evidence": settings.evidence_enabled})
    return agent
