"""A GPU's health as the agent's poller reads it through NVML: `GpuHealth`, one record per GPU, on
the NVML topic, published when a reading changes, when a minute with activity closes, and at a slow
heartbeat (`models.signals.health.publish`), never per poll.

A record carries the current readings (`HealthReading`), the recent history its decisions need
(`HealthHistory`: the last hour by the minute, the last day by the hour) and, per condition, when
its current episode began (`since`): a condition that still holds is reported again with the same
onset, so the stream stores it once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.node_records import EccCounts, NodeRecordBase, RemappedRows


def _now() -> datetime:
    return datetime.now(UTC)


class LinkReading(BaseModel):
    """One NVLink: its state, and its error counters when they were read (after a total changed)."""

    model_config = ConfigDict(frozen=True)

    link: int
    active: bool
    replay: int | None = None
    recovery: int | None = None
    crc_flit: int | None = None
    crc_data: int | None = None


class NvlinkErrors(BaseModel):
    """The GPU's NVLink error counters, summed over its links (NVML fields 38, 45, 52, 59)."""

    model_config = ConfigDict(frozen=True)

    crc_flit: int | None = None
    crc_data: int | None = None
    replay: int | None = None
    recovery: int | None = None

    @property
    def crc(self) -> int | None:
        return None if self.crc_flit is None and self.crc_data is None else (self.crc_flit or 0) + (self.crc_data or 0)

    @property
    def replays(self) -> int | None:
        return None if self.replay is None and self.recovery is None else (self.replay or 0) + (self.recovery or 0)


class HealthReading(BaseModel):
    """One poll of one GPU. A value the GPU does not support (NVML_ERROR_NOT_SUPPORTED) is None and
    its name is in `unsupported`."""

    model_config = ConfigDict(frozen=True)

    recovery_action: int | None = Field(default=None, description="NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (0: none)")
    remapped_rows: RemappedRows | None = None
    retired_sbe: int | None = Field(default=None, description="pages retired for single-bit errors")
    retired_dbe: int | None = Field(default=None, description="pages retired for double-bit errors")
    retired_pending: bool | None = None
    ecc: EccCounts | None = None
    nvlinks: tuple[LinkReading, ...] = ()
    nvlinks_seen: tuple[int, ...] = Field(
        default=(), description="the links the agent has seen active on this GPU: one of them inactive now is down "
        "(a link never trained, as on a card without its bridge, is not)")
    nvlink_errors: NvlinkErrors | None = None
    pcie_replays: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    clocks_event_reasons: int | None = None
    temperature_c: int | None = None
    temperature_slowdown_c: int | None = None
    slowdown_margin_c: int | None = Field(default=None, description="degrees below the slowdown temperature")
    power_mw: int | None = None
    power_limit_mw: int | None = Field(default=None, description="the enforced power limit")
    fabric_state: int | None = Field(default=None, description="NVML_GPU_FABRIC_STATE_* (NVSwitch systems)")
    fabric_status: int | None = Field(default=None, description="the fabric registration's NVML return code")
    fabric_health: int | None = Field(default=None, description="the fabric's health summary (v3), when known")
    unsupported: tuple[str, ...] = ()


class HealthHistory(BaseModel):
    """One resolution of a GPU's recent history, oldest sample first, a column per quantity.

    Sample `i` of `n` covers the `step_s` seconds ending at `end - (n - 1 - i) * step_s`. Counters are
    cumulative values at a sample's end; `reasons` is every clock-event reason seen during it,
    `margin_c` the lowest slowdown margin, `power_pct` the highest draw as a share of the enforced
    limit, `busy_gen` the lowest PCIe link generation while the GPU was not idle (None: idle or unknown).
    """

    model_config = ConfigDict(frozen=True)

    step_s: int
    end: datetime | None = None
    sbe: tuple[int | None, ...] = ()
    nvlink_crc: tuple[int | None, ...] = ()
    nvlink_replay: tuple[int | None, ...] = ()
    pcie_replays: tuple[int | None, ...] = ()
    reasons: tuple[int, ...] = ()
    margin_c: tuple[int | None, ...] = ()
    power_pct: tuple[int | None, ...] = ()
    busy_gen: tuple[int | None, ...] = ()

    def __len__(self) -> int:
        return len(self.reasons)


def _minutes() -> HealthHistory:
    return HealthHistory(step_s=60)


def _hours() -> HealthHistory:
    return HealthHistory(step_s=3600)


class GpuHealth(NodeRecordBase):
    """One GPU's health: its readings, their recent history and the onsets of its conditions."""

    kind: Literal["gpu_health"] = "gpu_health"
    gpu_uuid: str
    pci_bus_id: str | None = None
    index: int | None = None
    observed_at: datetime = Field(default_factory=_now)
    reading: HealthReading = Field(default_factory=HealthReading)
    minutes: HealthHistory = Field(default_factory=_minutes)
    hours: HealthHistory = Field(default_factory=_hours)
    since: dict[str, datetime] = Field(
        default_factory=dict, description="per condition (`models.signals.health.episodes`), when its episode began")
    published_for: Literal["change", "minute", "heartbeat", "first"] = "first"
