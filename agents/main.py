"""Compose the agent from its settings: the kernel path always, the side paths when enabled."""

from __future__ import annotations

import logging

from agents.runtime import Agent
from agents.settings import AgentSettings

log = logging.getLogger(__name__)


def build_agent(settings: AgentSettings) -> Agent:
    agent = Agent(settings)
    log.info("agent starting", extra={"node": settings.node, "source": settings.source,
                                      "bootstrap": settings.bootstrap_servers})
    return agent
