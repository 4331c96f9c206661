"""PCI addresses in the one form that records, incident keys and fingerprints carry.

The kernel writes `0000:3b:00.0`; the NVIDIA driver `PCI:0000:3b:00` (no function) in Xid and
identity lines, older drivers `0000:03:00`; NVML `00000000:3B:00.0` (an 8-digit domain). All of
them name the same device, written `dddd:bb:dd.f` in lower case: a domain of at least four hex
digits, bus, device and function (0 when the text gives none).
"""

from __future__ import annotations

import re
from functools import lru_cache

# A full address as the kernel prints it in device lines (`pcieport 0000:3a:00.0: ...`), for
# patterns that find addresses in text.
BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"

_HEX = "[0-9a-fA-F]"
_ADDRESS = re.compile(rf"(?:[Pp][Cc][Ii]:)?(?:({_HEX}{{4,8}}):)?({_HEX}{{2}}):({_HEX}{{2}})(?:\.([0-7]))?")


@lru_cache(maxsize=65536)
def normalize_pci(text: str | None) -> str | None:
    """`PCI:0000:3B:00`, `00000000:3B:00.0`, `3b:00.0` → `0000:3b:00.0`.

    None when `text` is empty or not a PCI address (a redacted `PCI:xxxx:xx:xx`, say). Called for
    every fault line the parser reads, so results are cached.
    """
    if not text:
        return None
    m = _ADDRESS.fullmatch(text.strip())
    if m is None:
        return None
    domain, bus, device, function = m.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{device.lower()}.{function or '0'}"
