"""What a sensor is to the node agent, and the registry `agents.main.build_agent` reads.

A sensor observes one thing on the node (NVML, the kubelet's PodResources API, ...) in a thread of
its own and hands each record to `SensorContext.publish`; the agent spools it and publishes it on
its kind's topic. The kernel-log path is not a sensor: it is the agent's own loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from agents.metrics import Metrics
from agents.settings import AgentSettings
from models.node_records import NodeRecordBase

if TYPE_CHECKING:
    from agents.runtime import Agent


class Sensor(Protocol):
    def start(self, stop: threading.Event) -> None:
        """Start observing in a thread of its own; return at once. Stop when `stop` is set."""
        ...

    def close(self) -> None:
        ...


@dataclass(frozen=True, slots=True)
class SensorContext:
    """What a sensor is built from."""

    settings: AgentSettings
    publish: Callable[[NodeRecordBase], None]  # thread-safe; fault records are never dropped
    metrics: Metrics
    agent: Agent  # for the hooks a sensor feeds: the pre-filter's GPU addresses, the evidence collector

    @property
    def node(self) -> str:
        return self.settings.node


@dataclass(frozen=True, slots=True)
class SensorSpec:
    """A sensor as registered: its name (in logs) and how to build it; `build` returns None when the
    settings turn it off."""

    name: str
    build: Callable[[SensorContext], Sensor | None]


_SENSORS: dict[str, SensorSpec] = {}


def register(spec: SensorSpec) -> SensorSpec:
    existing = _SENSORS.get(spec.name)
    if existing is not None and existing != spec:
        raise ValueError(f"sensor {spec.name!r} is already registered")
    _SENSORS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a sensor (tests that register one of their own)."""
    _SENSORS.pop(name, None)


def sensors() -> tuple[SensorSpec, ...]:
    """The registered sensors, in registration order (the order they are built and started in)."""
    return tuple(_SENSORS.values())
