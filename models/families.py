"""Fault families: the unit an incident groups by, together with the node and the GPU."""

from __future__ import annotations

from models.kernlog.record import FaultRecord

MEMORY_XIDS = frozenset({48, 63, 64, 92, 94, 95, 140, 156, 157, 171, 172})
GPU_LOST_XIDS = frozenset({79})
GSP_XIDS = frozenset({119, 120})
# Driver-error classes (models.kernlog.driver_lines) that name a fault of a family of their own;
# every other class is a driver fault, and `gpu_lost` and the `gsp*` classes are handled by name.
DRIVER_ERROR_FAMILIES = {
    # NVLink training or link failures reported by the knvlink code: the interconnect, as Xid 74.
    "nvlink_error": "nvlink",
    # "Attempting to remove device ... with non-zero usage count": the GPU left the PCI bus (hot
    # removal, or the kernel removing a device that stopped answering) while in use.
    "device_removal": "gpu_hardware",
    # A BAR the platform assigned is unusable ("BAR1 is 0M @ 0x0"): the GPU cannot be mapped.
    "pci_resource_invalid": "gpu_hardware",
    # The GPU's memory subsystem (FB, GMMU, bus) reported an error or timed out.
    "memory_subsystem_error": "gpu_hardware",
}
FAMILIES = (
    "gpu_lost", "memory", "nvlink", "nvswitch", "pcie", "gsp", "application", "gpu_hardware", "driver",
    "thermal", "recovery_action", "other",
)


def family_of(rec: FaultRecord) -> str:
    """The fault family of a record (stable names; they are part of incident fingerprints)."""
    kind = rec.kind
    if kind == "xid" and rec.xid is not None:
        code = rec.xid
        if code in GPU_LOST_XIDS:
            return "gpu_lost"
        if code in MEMORY_XIDS:
            return "memory"
        if code in GSP_XIDS:
            return "gsp"
        if code == 154:
            return "recovery_action"
        return {
            "interconnect": "nvlink",
            "application": "application",
            "hardware": "gpu_hardware",
            "driver": "driver",
            "thermal": "thermal",
        }.get(rec.category or "", "other")
    if kind == "gpu_fallen_off_bus":
        return "gpu_lost"
    if kind == "sxid":
        return "nvswitch"
    if kind == "pcie_aer":
        return "pcie"
    if kind == "ecc":
        return "memory"
    if kind == "driver_error":
        error = rec.details.get("error", "")
        if error == "gpu_lost":
            return "gpu_lost"
        if isinstance(error, str) and error.startswith("gsp"):
            return "gsp"
        return DRIVER_ERROR_FAMILIES.get(error, "driver") if isinstance(error, str) else "driver"
    return "other"
