"""The NVML signals: events the driver reports (critical Xids, double-bit ECC, a GPU gone) and
GPUs missing from the device count. Records `NvmlEvent` and `GpuMissing` on the NVML topic."""

from __future__ import annotations

from models.incidents import FaultObservation, observation_from_missing, observation_from_nvml
from models.node_records import NVML_TOPIC, GpuMissing, NvmlEvent
from models.signals.base import Signal


def _event(event: NvmlEvent) -> tuple[FaultObservation, ...]:
    observation = observation_from_nvml(event)
    return () if observation is None else (observation,)


def _missing(record: GpuMissing) -> tuple[FaultObservation, ...]:
    return (observation_from_missing(record),)


NVML_EVENT = Signal(NvmlEvent, NVML_TOPIC, _event)
GPU_MISSING = Signal(GpuMissing, NVML_TOPIC, _missing)
