"""The record the kernel-log parser emits: one recognised GPU fault or identity line.

The JSON field names of `FaultRecord.to_dict()` are the public contract of `xidpipe parse`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KINDS = ("xid", "sxid", "gpu_fallen_off_bus", "pcie_aer", "gpu_identity", "ecc", "driver_error")

# The public contract, in output order. Extra fields (`format`, `details`) follow them.
CONTRACT_FIELDS = (
    "line",
    "line_end",
    "kind",
    "timestamp",
    "uptime_s",
    "host",
    "pci",
    "source_pci",
    "xid",
    "sxid",
    "pid",
    "process",
    "message",
    "gpu_uuid",
    "serial",
    "mnemonic",
    "immediate_action",
    "category",
    "catalog_version",
    "raw",
)


@dataclass(slots=True)
class FaultRecord:
    line: int
    kind: str
    raw: str
    message: str
    line_end: int = 0
    timestamp: str | None = None
    uptime_s: float | None = None
    host: str | None = None
    pci: str | None = None
    source_pci: str | None = None
    xid: int | None = None
    sxid: int | None = None
    pid: int | None = None
    process: str | None = None
    gpu_uuid: str | None = None
    serial: str | None = None
    mnemonic: str | None = None
    immediate_action: str | None = None
    category: str | None = None
    catalog_version: str | None = None
    format: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def device(self) -> str | None:
        """The PCI address of the GPU the record is about (the AER source when known); None for a
        port's AER report that names no GPU (the GPU below the port is the inventory's to say)."""
        if self.kind == "pcie_aer" and self.details.get("subject") == "port":
            return None
        return self.source_pci or self.pci

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {name: getattr(self, name) for name in CONTRACT_FIELDS}
        out["line_end"] = self.line_end or self.line
        out["format"] = self.format
        out["details"] = self.details
        return out
