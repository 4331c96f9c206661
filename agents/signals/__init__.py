"""The node agent's sensors, one module each, registered here in the order they start.

A new health signal adds its sensor module (a `SensorSpec` whose `build` returns an object with
`start(stop)` and `close()`) and one entry in `SENSORS`; its record kind and the mapping of that
record to fault observations are registered in `models.signals`.
"""

from __future__ import annotations

from agents.signals import nvml, podresources
from agents.signals.base import Sensor, SensorContext, SensorSpec, register, sensors, unregister

SENSORS: tuple[SensorSpec, ...] = (
    nvml.SENSOR,
    podresources.SENSOR,
)

for _sensor in SENSORS:
    register(_sensor)

__all__ = ["SENSORS", "Sensor", "SensorContext", "SensorSpec", "register", "sensors", "unregister"]
