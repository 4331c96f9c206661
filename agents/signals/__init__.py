"""The node agent's sensors, one folder (or module) each, registered here in the order they start.

A new sensor adds its folder (a `SensorSpec`: its name, its own settings read from the agent's, how
to build it from its `SensorContext`, the capabilities it uses) and one entry in `SENSORS`; the record
kinds it publishes and their mapping to fault observations are registered in `models.signals`.
"""

from __future__ import annotations

from typing import Any

from agents.signals import health, nvml, podresources, workloads
from agents.signals.base import (
    CAPABILITIES,
    SYSTEM_CLOCK,
    Capability,
    Clock,
    EvidenceTrigger,
    GpuReport,
    Publish,
    Sensor,
    SensorContext,
    SensorSpec,
    SystemClock,
    Undeclared,
    register,
    sensors,
    unregister,
)

SENSORS: tuple[SensorSpec[Any], ...] = (
    nvml.SENSOR,
    health.SENSOR,
    podresources.SENSOR,
    workloads.SENSOR,
)

for _sensor in SENSORS:
    register(_sensor)

__all__ = ["CAPABILITIES", "SENSORS", "SYSTEM_CLOCK", "Capability", "Clock", "EvidenceTrigger", "GpuReport",
           "Publish", "Sensor", "SensorContext", "SensorSpec", "SystemClock", "Undeclared", "register", "sensors",
           "unregister"]
