"""PCIe AER reports assembled from their lines, and which of them are kept.

A report spans the port's `error received` line, the header and detail lines on the device the
error came from, and the recovery lines the AER driver prints for the devices below the port
(`messages.AER_RECOVERY`). `AerReports` is the part of `KernelLogParser` that joins these lines
and decides, when a report closes, whether it is kept:

- a report that names a GPU (the `nvidia` driver, vendor 10de, a device the driver named, or a
  port that reported for a GPU before) is the GPU's: `details.subject` is `gpu`;
- a port's report that names no device of another driver is kept as the port's: `subject` is
  `port` (`device` for a device no driver is bound to), with its BDF, severity and recovery
  lines. The GPU below a port is known from the node's PCI topology, not from the line, so the
  stream can tie the report to it;
- a report whose lines name a device of another driver (a NIC, an NVMe drive) is not kept.
"""

from __future__ import annotations

from typing import Any

from models.kernlog.mangled import repair
from models.kernlog.messages import AER_RECOVERY, CORRECTABLE_NAMES, Match, aer_continuation, recognise
from models.kernlog.record import FaultRecord

NVIDIA_VENDOR = "10de"
NVIDIA_DRIVER = "nvidia"
PORT_DRIVERS = frozenset({"pcieport"})  # the PCIe port service driver: root and switch ports
UNBOUND = "pci"  # the kernel's name for a device no driver is bound to
_OTHER_DEVICES_MAX = 4096  # devices of other drivers remembered (cleared when full)


class OpenRecord:
    """A record still accepting continuation lines."""

    __slots__ = ("below", "complete", "driver", "expects", "function", "kmsg", "others", "record")

    def __init__(self, record: FaultRecord, expects: str | None, kmsg: bool, complete: bool,
                 driver: str | None, function: str | None = None) -> None:
        self.record = record
        self.expects = expects
        self.kmsg = kmsg
        self.complete = complete
        self.driver = driver
        self.function = function
        self.others = driver is not None and not _ours(driver)  # an AER line named another driver's device
        self.below: dict[str, str] = {}  # AER: devices the recovery lines name, and their drivers


def _ours(driver: str) -> bool:
    """A driver whose device may be a GPU or the port above one."""
    return driver in (NVIDIA_DRIVER, UNBOUND) or driver in PORT_DRIVERS


def extend(opened: OpenRecord, raw: str, n: int, text: str | None) -> None:
    """Add a line to an open record: its raw text, its line number and (when given) its words."""
    rec = opened.record
    if rec.raw != raw:
        rec.raw = f"{rec.raw}\n{raw}"
    rec.line_end = n
    if text:
        rec.message = f"{rec.message} {text}".strip()


class AerReports:
    """AER report assembly for `KernelLogParser` (which owns the state below)."""

    _known_gpus: set[str]
    _gpu_root_ports: set[str]
    _correctable: dict[str, int]
    _other_devices: set[str]

    def _from_kernel(self, line: str) -> bool:
        raise NotImplementedError  # the parser's: whether the line's header names the kernel as its writer

    def _aer_continuation(self, opened: OpenRecord, line: str, n: int) -> bool:
        if not self._from_kernel(line):
            return False
        match = recognise(repair(line))
        if match is None or match.kind not in ("device_line", "pcie_aer") or match.pci not in (
            opened.record.pci,
            opened.record.source_pci,
        ):
            return False
        if match.kind == "pcie_aer" and match.source_pci != match.pci:
            return False  # a new "error received" report starts a new record
        fields = aer_continuation(match.message if match.kind == "device_line" else repair(line))
        if fields is None:
            return False
        rec = opened.record
        if match.kind == "pcie_aer" and "error_type" in rec.details and "error_type" in match.details:
            return False  # a second error header: a new error
        if match.driver == NVIDIA_DRIVER and match.pci:
            self._known_gpus.add(match.pci)
            opened.driver = NVIDIA_DRIVER
        elif match.driver is not None and not _ours(match.driver):
            opened.others = True
        errors: list[str] = rec.details.setdefault("errors", [])
        if "error" in fields:
            errors.append(fields["error"])
        for key in ("error_type", "agent", "vendor_id", "device_id"):
            if key in fields:
                rec.details[key] = fields[key]
        if "severity" in fields and rec.details.get("severity") == "corrected":
            rec.details["severity"] = fields["severity"]
        extend(opened, line, n, None)
        return True

    def _aer_recovery(self, opened: OpenRecord, line: str, n: int) -> bool:
        """A recovery line on a device below the reporting port joins the report; an NVIDIA device
        there makes the port a GPU's port (`details.affected` lists the GPUs named)."""
        if not self._from_kernel(line):
            return False
        match = recognise(repair(line))
        if match is None or match.kind != "device_line" or not AER_RECOVERY.search(match.message):
            return False
        if match.driver == NVIDIA_DRIVER and match.pci:
            self._known_gpus.add(match.pci)
            opened.driver = NVIDIA_DRIVER
            affected: list[str] = opened.record.details.setdefault("affected", [])
            if match.pci not in affected:
                affected.append(match.pci)
        elif match.pci and match.driver and match.pci not in (opened.record.pci, opened.record.source_pci):
            opened.below[match.pci] = match.driver
        extend(opened, line, n, None)
        return True

    def _note_device(self, match: Match) -> None:
        """Remember what a device line says of its device: a GPU, or a device of another driver."""
        if not match.pci or match.driver is None:
            return
        if match.driver == NVIDIA_DRIVER:
            self._known_gpus.add(match.pci)
        elif not _ours(match.driver):
            if len(self._other_devices) >= _OTHER_DEVICES_MAX:
                self._other_devices.clear()
            self._other_devices.add(match.pci)

    def _aer_is_gpu(self, opened: OpenRecord) -> bool:
        rec = opened.record
        if opened.driver == NVIDIA_DRIVER or rec.details.get("vendor_id") == NVIDIA_VENDOR:
            return True
        devices = {rec.pci, rec.source_pci}
        if devices & self._known_gpus:
            return True
        return rec.pci in self._gpu_root_ports and rec.source_pci == rec.pci

    def _aer_subject(self, opened: OpenRecord) -> str | None:
        """`gpu`, `port` or `device` (see the module's text); None for a report that is not kept."""
        if self._aer_is_gpu(opened):
            return "gpu"
        rec = opened.record
        if opened.others or rec.source_pci in self._other_devices:
            return None
        functions = {pci[:-1] for pci in rec.details.get("affected", ())}
        if any(not _ours(drv) and pci[:-1] not in functions for pci, drv in opened.below.items()):
            if rec.pci and rec.source_pci == rec.pci:  # the port serves a device of another driver
                self._other_devices.add(rec.pci)
            return None
        return "port" if rec.message.split(" ", 1)[0] in PORT_DRIVERS else "device"

    def _close_aer(self, opened: OpenRecord) -> bool:
        """Finish a closing AER report; whether it is kept."""
        subject = self._aer_subject(opened)
        if subject is None:
            return False
        rec = opened.record
        rec.details["subject"] = subject
        if subject == "gpu" and rec.pci and (rec.source_pci != rec.pci or rec.details.get("affected")):
            self._gpu_root_ports.add(rec.pci)
        self._aer_severity_and_count(rec)
        return True

    def _aer_severity_and_count(self, rec: FaultRecord) -> None:
        """A header-less report's severity from its error names; the GPU's running count of
        correctable reports (a trend: a link that logs correctable errors for hours before it fails)."""
        details: dict[str, Any] = rec.details
        errors = details.get("errors")
        if details.get("severity") == "unknown" and errors:
            details["severity"] = "corrected" if all(e in CORRECTABLE_NAMES for e in errors) else "non-fatal"
        if not errors:
            details.pop("errors", None)
        if details.get("severity") == "corrected":
            device = rec.source_pci or rec.pci or ""
            count = self._correctable.get(device, 0) + 1
            self._correctable[device] = count
            details["correctable_count"] = count
