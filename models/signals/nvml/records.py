"""The NVML signals' records, on the NVML topic: `NvmlEvent` (an event the driver reported through
NVML) and `GpuMissing` (a GPU lost, or fewer GPUs than the node had)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import Field

from models.node_records import NodeRecordBase


def _now() -> datetime:
    return datetime.now(UTC)


NvmlEventType = Literal[
    "xid_critical",
    "double_bit_ecc",
    "single_bit_ecc",
    "gpu_unavailable",
    "recovery_action",
    "mig_config_change",
    "other",
]


class NvmlEvent(NodeRecordBase):
    kind: Literal["nvml_event"] = "nvml_event"
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    event_type: NvmlEventType
    event_type_mask: int
    event_data: int
    xid: int | None = None
    gpu_instance_id: int | None = Field(default=None, description="None when not attributable to MIG")
    compute_instance_id: int | None = None
    observed_at: datetime = Field(default_factory=_now)


class GpuMissing(NodeRecordBase):
    kind: Literal["gpu_missing"] = "gpu_missing"
    reason: Literal["gpu_lost", "count_dropped"]
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    expected_count: int | None = None
    observed_count: int | None = None
    observed_at: datetime = Field(default_factory=_now)
