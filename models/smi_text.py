"""Facts from a recorded `nvidia-smi -q` (the evidence the agent captures at a fault).

The inventory the agent publishes may lack a card's VBIOS (NVML would not say); the capture taken at
the fault often has it. `vbios_version` reads it from the text, from the section of the GPU asked
for when the capture lists several.
"""

from __future__ import annotations

import re

_SECTION = re.compile(r"GPU [0-9A-Fa-f:.]+")  # a GPU's section starts with its PCI address at the margin
_UNKNOWN = {"", "N/A", "[N/A]", "Unknown Error", "[Unknown Error]"}


def _sections(text: str) -> list[dict[str, str]]:
    """Each GPU's `name : value` lines (the first of a name wins), in one pass over the lines."""
    out: list[dict[str, str]] = []
    for line in text.splitlines():
        if _SECTION.fullmatch(line.rstrip()):
            out.append({})
        elif out and line[:1].isspace():
            name, sep, value = line.partition(":")
            if sep:
                out[-1].setdefault(name.strip(), value.strip())
    return out


def vbios_version(text: str, uuid: str | None = None) -> str | None:
    """The VBIOS version in `text`, of the GPU with `uuid` when given (else of the first GPU)."""
    for fields in _sections(text):
        if uuid is not None and fields.get("GPU UUID", "").lower() != uuid.lower():
            continue
        value = fields.get("VBIOS Version", "")
        return None if value in _UNKNOWN else value
    return None
