"""What the node says about its GPUs and driver without NVML (`agents.signals.health.host`): the GPUs on
the PCI bus as lspci lists them, the loaded driver's version, the kernels a module is built for, its
signature, the lockdown; every read bounded."""

from __future__ import annotations

from pathlib import Path

from agents.signals.health import host


def device(sysfs: Path, address: str, vendor: str, klass: str) -> None:
    d = sysfs / "bus" / "pci" / "devices" / address
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(klass + "\n")


def test_the_nvidia_gpus_on_the_bus(tmp_path: Path) -> None:
    device(tmp_path, "0000:18:00.0", "0x10de", "0x030200")  # a 3D controller (H100)
    device(tmp_path, "0000:3b:00.0", "0x10de", "0x030000")  # a VGA controller
    device(tmp_path, "0000:05:00.0", "0x10de", "0x068000")  # an NVSwitch: not a GPU
    device(tmp_path, "0000:06:00.0", "0x15b3", "0x020700")  # a ConnectX NIC
    assert host.pci_gpus(tmp_path) == ("0000:18:00.0", "0000:3b:00.0")
    assert host.pci_gpus(tmp_path / "absent") == ()


def test_the_loaded_drivers_version(tmp_path: Path) -> None:
    version = tmp_path / "driver" / "nvidia" / "version"
    version.parent.mkdir(parents=True)
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
                       "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\nGCC version:  gcc version 12.3.0\n")
    assert host.driver_version(tmp_path) == "550.54.15"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n")
    assert host.driver_version(tmp_path) == "535.104.05"
    version.write_text("x" * 10_000_000)  # bounded: never read whole
    assert host.driver_version(tmp_path) is None
    assert host.driver_version(tmp_path / "none") is None


def test_the_kernels_a_module_is_built_for_and_its_signature(tmp_path: Path) -> None:
    dkms = tmp_path / "6.8.0-45-generic" / "updates" / "dkms"
    dkms.mkdir(parents=True)
    (dkms / "nvidia.ko").write_bytes(b"\x7fELF" + b"\0" * 64 + host.SIGNATURE_MAGIC)
    ubuntu = tmp_path / "6.8.0-49-generic" / "kernel" / "nvidia-550srv"
    ubuntu.mkdir(parents=True)
    (ubuntu / "nvidia.ko").write_bytes(b"\x7fELF" + b"\0" * 64)  # unsigned
    (tmp_path / "6.8.0-50-generic" / "kernel").mkdir(parents=True)  # the new kernel: no module
    assert host.modules(tmp_path, "6.8.0-45-generic") == host.Modules(("6.8.0-45-generic", "6.8.0-49-generic"), True)
    assert host.modules(tmp_path, "6.8.0-49-generic").signed is False
    assert host.modules(tmp_path, "6.8.0-50-generic") == host.Modules(("6.8.0-45-generic", "6.8.0-49-generic"), None)
    zst = tmp_path / "6.9.0-1-fake" / "extra"
    zst.mkdir(parents=True)
    (zst / "nvidia.ko.zst").write_bytes(b"(\xb5/\xfd")
    assert host.modules(tmp_path, "6.9.0-1-fake").signed is None  # compressed: cannot tell


def test_the_lockdown_in_force(tmp_path: Path) -> None:
    path = tmp_path / "kernel" / "security" / "lockdown"
    path.parent.mkdir(parents=True)
    path.write_text("none [integrity] confidentiality\n")
    assert host.lockdown(tmp_path) == "integrity"
    path.write_text("[none] integrity confidentiality\n")
    assert host.lockdown(tmp_path) == "none"
    assert host.lockdown(tmp_path / "absent") is None
