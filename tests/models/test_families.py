"""Fault families of driver-error records: the named classes that are no driver fault of their own."""

from __future__ import annotations

import pytest

from models.families import family_of
from models.kernlog import ParseOptions, parse_lines
from models.kernlog.driver_lines import DRIVER_ERRORS
from models.kernlog.record import FaultRecord
from models.vocabulary import FAMILIES


def driver_error(error: str) -> FaultRecord:
    return FaultRecord(line=1, kind="driver_error", raw="", message="", details={"error": error})


@pytest.mark.parametrize(("line", "family"), [
    ("NVRM: GPU 0000:3b:00.0: knvlinkCoreTrainLinks: link training failed on link 3", "nvlink"),
    ("NVRM: Attempting to remove device 0000:3b:00.0 with non-zero usage count!", "gpu_hardware"),
    ("NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:", "gpu_hardware"),
    ("NVRM: GPU 0000:3b:00.0: Memory Subsystem Error detected", "gpu_hardware"),
    ("NVRM: GPU 0000:3b:00.0: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST]", "gpu_lost"),
    ("NVRM: GPU 0000:3b:00.0: Check failed: reset required [NV_ERR_RESET_REQUIRED]", "driver"),
    ("NVRM: GPU 0000:3b:00.0: _kgspLogRpcTimeout: GSP RPC timeout", "gsp"),
    ("NVRM: GPU 0000:3b:00.0: GPU crash dump has been created.", "driver"),
    ("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x22:0xffff:667)", "driver"),
    ("NVRM: GPU 0000:3b:00.0: something unexpected failed", "driver"),
])
def test_driver_lines_take_the_family_of_their_class(line: str, family: str) -> None:
    records = list(parse_lines([line], ParseOptions(year=2025)))
    assert [r.kind for r in records] == ["driver_error"]
    assert family_of(records[0]) == family


def test_every_driver_error_class_has_a_known_family_and_the_hardware_ones_are_not_driver() -> None:
    families = {name: family_of(driver_error(name)) for name, _ in DRIVER_ERRORS}
    assert set(families.values()) <= set(FAMILIES)
    assert families["nvlink_error"] == "nvlink"
    assert {families[n] for n in ("device_removal", "pci_resource_invalid", "memory_subsystem_error")} == {
        "gpu_hardware"}
    assert families["gpu_lost"] == "gpu_lost"
    assert all(f == "gsp" for n, f in families.items() if n.startswith("gsp"))
    assert families["crash_dump"] == families["reset_required"] == families["rm_init_adapter_failed"] == "driver"


def test_a_record_without_a_class_is_a_driver_fault() -> None:
    assert family_of(FaultRecord(line=1, kind="driver_error", raw="", message="")) == "driver"
    assert family_of(FaultRecord(line=1, kind="driver_error", raw="", message="", details={"error": 3})) == "driver"
