"""What the node itself says about its GPUs and their driver, read from files with bounded reads: the
NVIDIA GPUs on the PCI bus (sysfs, as lspci lists them), the loaded driver's version
(`/proc/driver/nvidia/version`), the running kernel (`uname -r`), the kernels an nvidia module is
installed for (`/lib/modules/*/...`), whether the running kernel's module is signed, and the
kernel's lockdown mode. Nothing here runs a command.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from models.pci import normalize_pci

NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers (an NVSwitch is 0x0680, its audio 0x0403)
READ_LIMIT = 4096  # every file read here is a line or two
MAX_DEVICES = 4096
MAX_KERNELS = 64
SIGNATURE_MAGIC = b"~Module signature appended~\n"
# Where distributions install the nvidia module under /lib/modules/<kernel>/: DKMS, the precompiled
# packages (Ubuntu's linux-modules-nvidia-*, in kernel/nvidia-<branch>/), kmod packages (extra/).
_MODULE_DIRS = ("updates/dkms", "updates", "extra", "extra/nvidia", "kernel/drivers/video")
_MODULE_NAMES = ("nvidia.ko", "nvidia.ko.xz", "nvidia.ko.zst", "nvidia.ko.gz")
_VERSION = re.compile(r"Kernel Module(?: for \S{1,32})?\s{1,8}(?P<version>[0-9]{1,4}(?:\.[0-9]{1,4}){1,3})")


def read_small(path: Path, limit: int = READ_LIMIT) -> str | None:
    """At most `limit` bytes of a file, as text; None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def pci_gpus(sysfs_root: Path) -> tuple[str, ...]:
    """The PCI addresses of the NVIDIA GPUs on the bus (vendor 0x10de, a display or 3D controller)."""
    base = sysfs_root / "bus" / "pci" / "devices"
    found: list[str] = []
    try:
        entries = sorted(os.listdir(base))[:MAX_DEVICES]
    except OSError:
        return ()
    for name in entries:
        vendor = read_small(base / name / "vendor", 16)
        if vendor is None or vendor.strip().lower() != NVIDIA_VENDOR:
            continue
        klass = (read_small(base / name / "class", 16) or "").strip().lower()
        address = normalize_pci(name)
        if klass.startswith(GPU_CLASSES) and address:
            found.append(address)
    return tuple(found)


def driver_version(proc_root: Path) -> str | None:
    """The loaded kernel module's version, from /proc/driver/nvidia/version; None when it is not loaded."""
    text = read_small(proc_root / "driver" / "nvidia" / "version")
    m = _VERSION.search(text or "")
    return m["version"] if m else None


@dataclass(frozen=True, slots=True)
class Modules:
    kernels: tuple[str, ...]  # kernels an nvidia module is installed for
    signed: bool | None  # the running kernel's module carries a signature (None: none there, or compressed)


def _module_of(kernel_dir: Path) -> Path | None:
    for sub in _MODULE_DIRS:
        for name in _MODULE_NAMES:
            path = kernel_dir / sub / name
            if path.is_file():
                return path
    try:  # kernel/nvidia-<branch>/nvidia.ko (Ubuntu's precompiled modules)
        branches = [e for e in os.listdir(kernel_dir / "kernel") if e.startswith("nvidia")][:8]
    except OSError:
        return None
    for branch in sorted(branches):
        for name in _MODULE_NAMES:
            path = kernel_dir / "kernel" / branch / name
            if path.is_file():
                return path
    return None


def modules(modules_root: Path, running: str) -> Modules:
    """The kernels under `modules_root` an nvidia module is installed for, and whether the running
    kernel's is signed (its last bytes are the kernel's signature marker)."""
    try:
        kernels = sorted(os.listdir(modules_root))[:MAX_KERNELS]
    except OSError:
        return Modules((), None)
    have = tuple(k for k in kernels if _module_of(modules_root / k) is not None)
    mine = _module_of(modules_root / running) if running in have else None
    return Modules(have, signature_appended(mine) if mine is not None else None)


def signature_appended(path: Path) -> bool | None:
    """Whether an uncompressed module ends with the kernel's signature marker (None: compressed)."""
    if path.suffix != ".ko":
        return None
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - len(SIGNATURE_MAGIC)))
            return fh.read(len(SIGNATURE_MAGIC)) == SIGNATURE_MAGIC
    except OSError:
        return None


def lockdown(sysfs_root: Path) -> str | None:
    """The kernel's lockdown mode in force ("none", "integrity", "confidentiality"), the bracketed one."""
    text = read_small(sysfs_root / "kernel" / "security" / "lockdown", 256)
    m = re.search(r"\[(\w{1,32})\]", text or "")
    return m[1] if m else None


def kernel_release() -> str:
    """`uname -r`: a container shares its node's kernel."""
    return os.uname().release
