"""The driver's multi-line notices about one GPU, read as one record each.

The driver writes these notices over several `NVRM:` lines, the first naming the GPU and the
kind of notice known only from a later line (`src/nvidia/arch/nvalloc/unix/src/osapi.c`,
`rm_is_supported_device`, and the legacy-GPU check of the proprietary driver):

    NVRM: The NVIDIA GPU 0000:63:00.0
    NVRM: (PCI ID: 10de:2330) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

    NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1050)
    NVRM: installed in this system is not supported by the
    NVRM: NVIDIA 535.54.03 driver release.
    NVRM: Please see 'Appendix A - Supported NVIDIA GPU Products'
    ...

    NVRM: The NVIDIA GeForce GT 710 GPU installed in this system is
    NVRM:  supported through the NVIDIA 470.xx Legacy drivers. Please
    NVRM:  visit http://www.nvidia.com/object/unix.html for more
    NVRM:  information.  The 535.129.03 NVIDIA driver will ignore
    NVRM:  this GPU.  Continuing probe...

`opener` recognises a first line, `continues` the lines that carry on a notice (and nothing that
starts a record of its own), and `settle` says what the joined text is: a GPU fallen off the bus,
or a GPU the driver did not take (`gpu_not_supported`, `legacy_gpu`, with the PCI ID, the driver
and legacy branches and the reason).
"""

from __future__ import annotations

import re
from typing import Any

OPENER = re.compile(r"The NVIDIA v?GPU (?P<pci>(?!installed\b)\S{1,64})")
LEGACY_OPENER = re.compile(r"The NVIDIA (?P<name>[^\n]{1,96}?) GPU installed in this system is\b")
PCI_ID = re.compile(r"\(PCI ID: (?P<id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\)")
FALLEN = "fallen off the bus"
_UNSUPPORTED = re.compile(r"\bis not supported by\b")
_RELEASE = re.compile(r"not supported by the\s+(?:NVIDIA\s+)?(?P<ver>[0-9]{2,4}(?:\.[0-9]{1,3}){1,2})")
_LEGACY = re.compile(r"supported through the NVIDIA (?P<branch>[0-9]{2,4}\.xx|\S{1,16}) Legacy drivers?")
_IGNORES = re.compile(r"The (?P<ver>[0-9]{2,4}(?:\.[0-9]{1,3}){1,2}) NVIDIA driver will ignore")
# A line that starts a message of its own rather than carrying on a notice: a GPU's line
# (`GPU 0000:..`, `GPU0 fn:`), another notice, the module banner, or a function's line (`fn: ...`).
_OWN_START = re.compile(r"^(?:GPU\b|GPU[0-9]|The NVIDIA|loading |Xid\b|[A-Za-z_][\w.]{0,80}: )")


def opener(text: str) -> dict[str, Any] | None:
    """Fields of a notice's first line (the text after `NVRM: `): `pci` text, `pci_id`,
    `gpu_name`; None for any other line."""
    m = OPENER.match(text)
    if m:
        fields: dict[str, Any] = {"pci": m["pci"]}
        pid = PCI_ID.search(text, m.end())
        if pid:
            fields["pci_id"] = pid["id"].lower()
        return fields
    legacy = LEGACY_OPENER.match(text)
    if legacy:
        return {"pci": None, "gpu_name": legacy["name"].strip()}
    return None


def continues(text: str) -> bool:
    """Whether an `NVRM:` line's text (after `NVRM:`) can carry on an open notice."""
    return bool(text) and _OWN_START.match(text.strip()) is None


def settle(text: str) -> tuple[str, dict[str, Any]] | None:
    """What a notice's joined text says: (`gpu_fallen_off_bus` or `driver_error`, details); None
    while the words that decide it have not come."""
    details: dict[str, Any] = {}
    pci_id = PCI_ID.search(text)
    if pci_id:
        details["pci_id"] = pci_id["id"].lower()
    if FALLEN in text:
        return "gpu_fallen_off_bus", details
    legacy = _LEGACY.search(text)
    if legacy:
        details.update(error="legacy_gpu", reason="legacy_gpu", legacy_branch=legacy["branch"])
        ignores = _IGNORES.search(text)
        if ignores:
            details["driver_version"] = ignores["ver"]
        return "driver_error", details
    if _UNSUPPORTED.search(text):
        details["error"] = "gpu_not_supported"
        if "open" in text and "nvidia.ko" in text:
            details["reason"] = "vgpu_host_unsupported" if "vGPU host" in text else (
                "no_gsp" if "GSP" in text or "System Processor" in text else "open_module_unsupported")
        else:
            details["reason"] = "not_in_release"
            release = _RELEASE.search(text)
            if release:
                details["driver_version"] = release["ver"]
        return "driver_error", details
    return None
