"""The NVML signals: events the driver reports (critical Xids, double-bit ECC, a GPU gone, a
recovery action) and GPUs missing from the device count, on the NVML topic.

The records are `models.signals.nvml.records`, their mapping to fault observations
`models.signals.nvml.mapping`; the sensor that publishes them is `agents.signals.nvml`.
"""

from __future__ import annotations

from models.incidents import FaultObservation
from models.node_records import NVML_TOPIC
from models.signals.base import Signal
from models.signals.nvml.mapping import observation_from_missing, observation_from_nvml
from models.signals.nvml.records import GpuMissing, NvmlEvent, NvmlEventType


def _event(event: NvmlEvent) -> tuple[FaultObservation, ...]:
    observation = observation_from_nvml(event)
    return () if observation is None else (observation,)


def _missing(record: GpuMissing) -> tuple[FaultObservation, ...]:
    return (observation_from_missing(record),)


NVML_EVENT = Signal(NvmlEvent, NVML_TOPIC, _event)
GPU_MISSING = Signal(GpuMissing, NVML_TOPIC, _missing)
SIGNALS = (NVML_EVENT, GPU_MISSING)

__all__ = ["GPU_MISSING", "NVML_EVENT", "SIGNALS", "GpuMissing", "NvmlEvent", "NvmlEventType",
           "observation_from_missing", "observation_from_nvml"]
