"""Compose the agent from its settings: the kernel path always, the evidence collector and the
registered sensors (`agents.signals`) when their settings enable them.

Each sensor is built from a context of its own (`sensor_context`) holding what every sensor gets (the
node, `publish`, the clock, the metrics, its own settings) and the capabilities its spec declares,
nothing else: a capability is a narrow callable of the agent (or the NVML caller), never the agent or
another sensor, so the order in which the collector and the sensors are built and started is free.
"""

from __future__ import annotations

import logging
from typing import Any

from agents.evidence import EvidenceCollector
from agents.nvml_calls import NvmlCaller
from agents.runtime import Agent
from agents.settings import AgentSettings
from agents.signals import SYSTEM_CLOCK, Clock, SensorContext, SensorSpec, sensors

log = logging.getLogger(__name__)


class _Lender:
    """What the agent lends its sensors; the NVML caller is one for all of them (its stuck-call limit
    is the process's), made when a sensor first declares it."""

    def __init__(self, settings: AgentSettings, agent: Agent, clock: Clock) -> None:
        self._settings = settings
        self._agent = agent
        self._clock = clock
        self._nvml: NvmlCaller | None = None

    def _nvml_caller(self) -> NvmlCaller:
        if self._nvml is None:
            self._nvml = NvmlCaller(self._settings.nvml_call_timeout_s, self._agent.metrics)
        return self._nvml

    def context(self, spec: SensorSpec[Any], own: Any) -> SensorContext[Any]:
        uses, agent = spec.uses, self._agent
        return SensorContext(
            sensor=spec.name, node=self._settings.node, settings=own, publish=agent.emit, clock=self._clock,
            metrics=agent.metrics, uses=uses,
            nvml_caller=self._nvml_caller() if "nvml" in uses else None,
            evidence_trigger=agent.trigger_evidence if "evidence" in uses else None,
            gpu_report=agent.gpus.report if "gpus" in uses else None,
        )


def build_agent(settings: AgentSettings, *, clock: Clock = SYSTEM_CLOCK) -> Agent:
    """The agent of `settings`; its sensors read the time from `clock` (a simulated one in tests)."""
    agent = Agent(settings)
    if settings.evidence_enabled:
        agent.evidence = EvidenceCollector.from_settings(settings, publish=agent.emit, metrics=agent.metrics,
                                                         gpu_lookup=agent.gpus.gpu_for_bus)
    lender = _Lender(settings, agent, clock)
    started: list[str] = []
    for spec in sensors():
        own = spec.settings(settings)
        if own is not None:
            agent.add_side_path(spec.build(lender.context(spec, own)))
            started.append(spec.name)
    log.info("agent starting", extra={"node": settings.node, "source": settings.source,
                                      "bootstrap": settings.bootstrap_servers, "nvml": settings.nvml_enabled,
                                      "podresources": settings.podresources_enabled,
                                      "evidence": settings.evidence_enabled, "sensors": started})
    return agent
