"""The node's GPUs as a whole, as the agent's poller sees them: `NodeGpuHealth`, one record per node on
the NVML topic, published when it changes and at the poller's heartbeat.

It says whether NVML answers (and how long it has not), how many GPUs NVML, the PCI bus and the
expected count (a setting, else the last good inventory the agent kept) name, and whether the
driver is loaded: its version (`/proc/driver/nvidia/version`), the running kernel (`uname -r`), the
kernels an nvidia module is installed for, whether the running kernel's module is signed and
whether the kernel's lockdown refuses unsigned modules.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import Field

from models.node_records import NodeRecordBase

NvmlState = Literal["ok", "unresponsive", "unavailable"]


def _now() -> datetime:
    return datetime.now(UTC)


class NodeGpuHealth(NodeRecordBase):
    kind: Literal["node_gpu_health"] = "node_gpu_health"
    observed_at: datetime = Field(default_factory=_now)
    nvml: NvmlState = "ok"
    nvml_error: str | None = Field(default=None, description="NVML's error when it is unavailable (DriverNotLoaded, "
                                   "LibraryNotFound, LibRmVersionMismatch, ...)")
    nvml_stuck: tuple[str, ...] = Field(default=(), description="the NVML calls that timed out")
    nvml_count: int | None = None
    nvml_gpus: tuple[str, ...] = Field(default=(), description="the PCI addresses of the GPUs NVML lists")
    pci_gpus: tuple[str, ...] = Field(default=(), description="the PCI addresses of NVIDIA GPUs on the bus (sysfs)")
    expected_count: int | None = None
    expected_from: Literal["setting", "inventory"] | None = None
    kernel_release: str | None = None
    driver_version: str | None = Field(default=None, description="the loaded kernel module's version; None: not loaded")
    module_kernels: tuple[str, ...] = Field(default=(), description="kernels an nvidia module is installed for")
    module_signed: bool | None = Field(default=None, description="the running kernel's nvidia module carries a "
                                       "signature (None: no module, or compressed)")
    lockdown: str | None = Field(default=None, description="the kernel lockdown mode in force (none, integrity, "
                                 "confidentiality)")
    since: dict[str, datetime] = Field(default_factory=dict, description="per condition, when it began")
