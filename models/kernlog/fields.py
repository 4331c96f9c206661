"""The fields around an Xid code, read so that a bad field never costs the code.

An Xid line names the GPU, the process and its name around the code: `NVRM: Xid
(PCI:0000:3b:00): 79, pid=1234, name=python3, ...`. Pasted and edited logs bend these fields
(`pid='N/A'`, `pid=1234*`, `PCI:0000:3b:ff`, `name=\\<unknown\\>`), and a field that does not read
as what it names is no reason to lose the fault: the record keeps its code with the field empty,
and `details.invalid` keeps the text as printed, by field name. Placeholders that mean "none"
(`<unknown>`, `N/A`, an empty field) are no value and no invalid field either.
"""

from __future__ import annotations

from models.kernlog.limits import PCI_DEVICE_MAX, PID_MAX
from models.pci import normalize_pci

# Placeholders for "no value", as the driver prints them (`'<unknown>'`) and as people write them.
_NONE = frozenset({"", "<unknown>", "unknown", "n/a", "na", "none", "-", "?", "<none>", "null"})
# Around a pid, characters a page or an editor adds: quotes, Markdown emphasis, escapes, brackets.
_PID_NOISE = "'\"`*_\\[]()<> \t"


def _bare(text: str) -> str:
    return text.strip().strip("'\"`*").strip()


def read_pid(text: str) -> tuple[int | None, str | None]:
    """(pid, None) for ASCII digits up to pid_max, also wrapped in quotes or Markdown marks;
    (None, None) for a placeholder; (None, text) for a field that is no pid."""
    if text.isdigit() and text.isascii() and len(text) <= 7 and (text[0] != "0" or len(text) == 1):
        value = int(text)  # the driver's own form
        return (value, None) if value <= PID_MAX else (None, text)
    bare = _bare(text)
    if bare.lower() in _NONE:
        return None, None
    core = bare.strip(_PID_NOISE)
    # The driver prints a pid with %d: digits with a leading zero are no pid it wrote.
    if core.isascii() and core.isdigit() and (core[0] != "0" or len(core) == 1):
        value = int(core) if len(core) <= 10 else PID_MAX + 1
        return (value, None) if value <= PID_MAX else (None, text.strip())
    return None, text.strip()


def read_name(text: str) -> str | None:
    """The process name, None for a placeholder (`<unknown>`, also quoted)."""
    name = text.strip()
    return None if _bare(name).lower() in _NONE else name


def read_pci(text: str | None) -> tuple[str | None, str | None]:
    """(canonical address, None); (None, None) for no field; (None, text) for a field that is no
    address (a redacted `PCI:xxxx:xx:xx`, a device number above 0x1f)."""
    if text is None or not text.strip():
        return None, None
    pci = normalize_pci(text)
    if pci is None or int(pci[-4:-2], 16) > PCI_DEVICE_MAX:
        return None, text.strip()
    return pci, None
