"""Compose the agent from its settings: the kernel path always, the evidence collector and the
registered sensors (`agents.signals`) when their settings enable them."""

from __future__ import annotations

import logging

from agents.runtime import Agent
from agents.settings import AgentSettings
from agents.signals import SensorContext, sensors

log = logging.getLogger(__name__)


def build_agent(settings: AgentSettings) -> Agent:
    agent = Agent(settings)
    if settings.evidence_enabled:
        from agents.evidence import EvidenceCollector

        agent.evidence = EvidenceCollector.from_settings(settings, publish=agent.emit, metrics=agent.metrics)
    ctx = SensorContext(settings=settings, publish=agent.emit, metrics=agent.metrics, agent=agent)
    started: list[str] = []
    for spec in sensors():
        sensor = spec.build(ctx)
        if sensor is not None:
            agent.add_side_path(sensor)
            started.append(spec.name)
    log.info("agent starting", extra={"node": settings.node, "source": settings.source,
                                      "bootstrap": settings.bootstrap_servers, "nvml": settings.nvml_enabled,
                                      "podresources": settings.podresources_enabled,
                                      "evidence": settings.evidence_enabled, "sensors": started})
    return agent
