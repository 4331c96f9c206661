"""Fault families: the unit an incident groups by, together with the node and the GPU.

The families themselves, and their precedence, are `models.vocabulary.Family`."""

from __future__ import annotations

from models.kernlog.record import FaultRecord
from models.vocabulary import Category, Family

MEMORY_XIDS = frozenset({48, 63, 64, 92, 94, 95, 140, 156, 157, 171, 172})
GPU_LOST_XIDS = frozenset({79})
GSP_XIDS = frozenset({119, 120})
# Driver-error classes (models.kernlog.driver_lines) that name a fault of a family of their own;
# every other class is a driver fault, and `gpu_lost` and the `gsp*` classes are handled by name.
DRIVER_ERROR_FAMILIES: dict[str, Family] = {
    # NVLink training or link failures reported by the knvlink code: the interconnect, as Xid 74.
    "nvlink_error": Family.NVLINK,
    # "Attempting to remove device ... with non-zero usage count": the GPU left the PCI bus (hot
    # removal, or the kernel removing a device that stopped answering) while in use.
    "device_removal": Family.GPU_HARDWARE,
    # A BAR the platform assigned is unusable ("BAR1 is 0M @ 0x0"): the GPU cannot be mapped.
    "pci_resource_invalid": Family.GPU_HARDWARE,
    # The GPU's memory subsystem (FB, GMMU, bus) reported an error or timed out.
    "memory_subsystem_error": Family.GPU_HARDWARE,
}
# The family of an Xid no code set above names, by its catalog category.
_CATEGORY_FAMILIES: dict[str, Family] = {
    Category.INTERCONNECT: Family.NVLINK,
    Category.APPLICATION: Family.APPLICATION,
    Category.HARDWARE: Family.GPU_HARDWARE,
    Category.DRIVER: Family.DRIVER,
    Category.THERMAL: Family.THERMAL,
}


def family_of(rec: FaultRecord) -> Family:
    """The fault family of a record (stable names; they are part of incident fingerprints)."""
    kind = rec.kind
    if kind == "xid" and rec.xid is not None:
        code = rec.xid
        if code in GPU_LOST_XIDS:
            return Family.GPU_LOST
        if code in MEMORY_XIDS:
            return Family.MEMORY
        if code in GSP_XIDS:
            return Family.GSP
        if code == 154:
            return Family.RECOVERY_ACTION
        return _CATEGORY_FAMILIES.get(rec.category or "", Family.OTHER)
    if kind == "gpu_fallen_off_bus":
        return Family.GPU_LOST
    if kind == "sxid":
        return Family.NVSWITCH
    if kind == "pcie_aer":
        return Family.PCIE
    if kind == "ecc":
        return Family.MEMORY
    if kind == "driver_error":
        error = rec.details.get("error", "")
        if error == "gpu_lost":
            return Family.GPU_LOST
        if isinstance(error, str) and error.startswith("gsp"):
            return Family.GSP
        return DRIVER_ERROR_FAMILIES.get(error, Family.DRIVER) if isinstance(error, str) else Family.DRIVER
    return Family.OTHER
