"""The general forms a parser that never loses a fault must read (issue #23): a pending notice
never swallows a record of its own, an Xid code survives its bad neighbours, notices of a driver
that did not come up, ports' AER reports, redacted and empty identities, and pasted lines.

Each form is tried on variants written here, not on the corpus's lines (those are in
`corpus/real_world.jsonl`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from models.kernlog import FaultRecord, KernelLogParser, ParseOptions
from models.kernlog.mangled import repair, split_messages

OPTS = ParseOptions(year=2025, now=datetime(2025, 12, 20, tzinfo=UTC))


def parse(lines: list[str]) -> list[FaultRecord]:
    return list(KernelLogParser(OPTS).parse(lines))


def brief(records: list[FaultRecord], *keys: str) -> list[tuple[Any, ...]]:
    return [tuple(r.details.get(k[8:]) if k.startswith("details.") else getattr(r, k) for k in keys)
            for r in records]


# -- a pending notice never absorbs a record of its own ---------------------------------------

OPENERS = [
    "[ 7.1] NVRM: The NVIDIA GPU 0000:a1:00.0",
    "[ 7.1] NVRM: The NVIDIA GPU 0000:a1:00.0 (PCI ID: 10de:20b5)",
    "Jan 02 10:00:00 node4 kernel: NVRM: The NVIDIA Tesla K80 GPU installed in this system is",
]
OWN_RECORDS = [
    ("[ 7.2] NVRM: Xid (PCI:0000:a1:00): 13, pid=77, name=train, Graphics Exception", "xid"),
    ("[ 7.2] NVRM: GPU at PCI:0000:a1:00: GPU-0a1b2c3d-0000-1111-2222-333344445555", "gpu_identity"),
    ("[ 7.2] NVRM: The NVIDIA probe routine failed for 2 device(s).", "driver_error"),
    ("[ 7.2] NVRM: GPU 0000:a1:00.0: RmInitAdapter failed! (0x22:0x56:894)", "driver_error"),
    ("[ 7.2] nvidia-nvswitch1: SXid (PCI:0000:c1:00.0): 20034, Fatal, Link 3 LTSSM Fault Up", "sxid"),
]


@pytest.mark.parametrize("opener", OPENERS)
@pytest.mark.parametrize(("line", "kind"), OWN_RECORDS)
def test_an_open_notice_closes_before_a_line_that_starts_a_record(opener: str, line: str, kind: str) -> None:
    records = parse([opener, line])
    assert [(r.kind, r.line, r.line_end) for r in records] == [(kind, 2, 2)]


def test_the_notice_and_the_record_after_it_are_both_kept_when_the_notice_is_whole() -> None:
    records = parse(["NVRM: The NVIDIA GPU 0000:a1:00.0",
                     "NVRM: (PCI ID: 10de:20b5) installed in this system has",
                     "NVRM: fallen off the bus and is not responding to commands.",
                     "NVRM: Xid (PCI:0000:a1:00): 13, pid=77, name=train, Graphics Exception"])
    assert brief(records, "kind", "line", "line_end", "pci", "details.pci_id") == [
        ("gpu_fallen_off_bus", 1, 3, "0000:a1:00.0", "10de:20b5"), ("xid", 4, 4, "0000:a1:00.0", None)]


# -- an Xid code survives malformed neighbouring fields ----------------------------------------

@pytest.mark.parametrize(("line", "xid", "pci", "pid", "process", "invalid"), [
    # pid placeholders as people write them: no pid, nothing invalid
    ("NVRM: Xid (PCI:0000:65:00): 119, pid='N/A', Timeout", 119, "0000:65:00.0", None, None, None),
    ("NVRM: Xid (PCI:0000:65:00): 48, pid=\u2018<unknown>\u2019, name=<unknown>, DBE", 48, "0000:65:00.0", None, None,
     None),
    ("NVRM: Xid (PCI:0000:65:00): 48, pid=&#39;&lt;unknown&gt;&#39;, name=&lt;unknown&gt;, DBE", 48, "0000:65:00.0",
     None, None, None),
    ("NVRM: Xid (PCI:0000:65:00): 48, pid='\\<unknown\\>', name=\\<unknown\\>, DBE", 48, "0000:65:00.0", None, None,
     None),
    # pid and name with a page's marks around them
    ("NVRM: Xid (PCI:0000:65:00): 31, pid=**4242**, name=job\\_7, MMU Fault", 31, "0000:65:00.0", 4242, "job_7", None),
    ("NVRM: Xid (PCI:0000:65:00): 31, pid=`4242`, name=job, MMU Fault", 31, "0000:65:00.0", 4242, "job", None),
    # fields that are no value: kept as printed, the code kept
    ("NVRM: Xid (PCI:0000:65:00): 43, pid=42a, name=job, Ch 00000010", 43, "0000:65:00.0", None, "job", {"pid": "42a"}),
    ("NVRM: Xid (PCI:0000:65:00): 43, pid=0042, name=job, Ch 00000010", 43, "0000:65:00.0", None, "job",
     {"pid": "0042"}),
    ("NVRM: Xid (PCI:0000:65:00): 43, pid=99999999999, name=job, x", 43, "0000:65:00.0", None, "job",
     {"pid": "99999999999"}),
    ("NVRM: Xid (PCI:0000:65:3f): 79, pid=1, name=job, GPU has fallen off the bus.", 79, None, 1, "job",
     {"pci": "PCI:0000:65:3f"}),
    ("NVRM: Xid (PCI:00zz:65:00): 79, GPU has fallen off the bus.", 79, None, None, None, {"pci": "PCI:00zz:65:00"}),
    # lines cut or bent after the code
    ("[ 99.1] NVRM: Xid (PCI:0000:65:00): 94", 94, "0000:65:00.0", None, None, None),
    ("[ 99.1] NVRM: Xid (PCI:0000:65:00): 154 (", 154, "0000:65:00.0", None, None, None),
    ("[ 99.1] NVRM: Xid (PCI:0000:65:00): 95.", 95, "0000:65:00.0", None, None, None),
    ("[ 99.1] NVRM: Xid (PCI:0000:65:00): 79, GPU has fallen off the bus.) | |", 79, "0000:65:00.0", None, None,
     None),
    ("NVRM: Xid 62, 323f0f30 0000c3d8", 62, None, None, None, None),
])
def test_the_code_survives_a_bad_neighbouring_field(line: str, xid: int, pci: str | None, pid: int | None,
                                                    process: str | None, invalid: dict[str, str] | None) -> None:
    (rec,) = parse([line])
    assert (rec.kind, rec.xid, rec.pci, rec.pid, rec.process, rec.details.get("invalid")) == (
        "xid", xid, pci, pid, process, invalid)


@pytest.mark.parametrize("line", [
    "radeon: probe of 0000:01:00.0 failed with error -22",  # another driver's probe
    "NVRM: Xid (PCI:0000:XX:00): CODE, pid=XXXX, name=PROCESS....",  # a template, no code
    "NVRM: Xid (PCI:0000:65:00): 1234, pid=1, name=a, x",  # a code out of range
    "NVRM: Xid (PCI:0000:65:00): 7\u0669, pid=1, name=a, x",  # a digit of another script in the code
])
def test_a_line_whose_code_does_not_read_is_no_fault(line: str) -> None:
    assert parse([line]) == []


# -- notices of a driver that did not come up ---------------------------------------------------

@pytest.mark.parametrize(("lines", "expect"), [
    (["NVRM: The NVIDIA GPU 0000:04:00.0 (PCI ID: 10de:1b38)",
      "NVRM: installed in this system is not supported by the",
      "NVRM: NVIDIA 580.95.05 driver release.",
      "NVRM: Please see 'Appendix A - Supported NVIDIA GPU Products'",
      "NVRM: in this release's README, available on the operating system",
      "NVRM: specific graphics driver download page at www.nvidia.com."],
     {"error": "gpu_not_supported", "reason": "not_in_release", "pci_id": "10de:1b38", "driver_version": "580.95.05",
      "pci": "0000:04:00.0", "line_end": 6}),
    (["NVRM: The NVIDIA GPU 0000:04:00.0 (PCI ID: 10de:1b38)",
      "NVRM: installed in this system is not supported by open",
      "NVRM: nvidia.ko because it does not include the required GPU",
      "NVRM: System Processor (GSP).",
      "NVRM: Please see the 'Open Linux Kernel Modules' and 'GSP",
      "NVRM: Firmware' sections in the driver README, available on",
      "NVRM: the Linux graphics driver download page at",
      "NVRM: www.nvidia.com."],
     {"error": "gpu_not_supported", "reason": "no_gsp", "pci_id": "10de:1b38", "pci": "0000:04:00.0", "line_end": 8}),
    (["[   3.3] NVRM: The NVIDIA Quadro K620 GPU installed in this system is",
      "          NVRM:  supported through the NVIDIA 470.xx Legacy drivers. Please",
      "          NVRM:  visit http://www.nvidia.com/object/unix.html for more",
      "          NVRM:  information.  The 550.40.07 NVIDIA driver will ignore",
      "          NVRM:  this GPU.  Continuing probe..."],
     {"error": "legacy_gpu", "legacy_branch": "470.xx", "driver_version": "550.40.07", "gpu_name": "Quadro K620",
      "pci": None, "line_end": 5}),
    (["NVRM: ignoring the legacy GPU 0000:02:00.0"], {"error": "legacy_gpu", "pci": "0000:02:00.0", "line_end": 1}),
    (["NVRM: The NVIDIA probe routine failed for 3 device(s)."], {"error": "probe_failed", "devices": 3}),
    (["NVRM: None of the NVIDIA graphics adapters were initialized!"], {"error": "no_gpu_found"}),
    (["NVRM: No NVIDIA devices probed."], {"error": "no_gpu_found"}),
    (["[ 12.0] nvidia: probe of 0000:c1:00.0 failed with error -1"],
     {"error": "probe_failed", "errno": -1, "pci": "0000:c1:00.0"}),
    (["[ 12.0] nvidia 0000:c1:00.0: Direct firmware load for nvidia/580.65.06/gsp_tu10x.bin failed with error -2"],
     {"error": "firmware_missing", "errno": -2, "pci": "0000:c1:00.0"}),
    (["NVRM: GPU 0000:81:00.0: RmInitAdapter failed! (0x25:0x40:1470)"],
     {"error": "rm_init_adapter_failed", "init_status": "0x25", "rm_status": "0x40", "rm_line": 1470,
      "pci": "0000:81:00.0"}),
    (["NVRM: API mismatch: the client has the version 570.86.15, but",
      "NVRM: this kernel module has the version 565.57.01.  Please",
      "NVRM: make sure that this kernel module and all NVIDIA driver",
      "NVRM: components have the same version."],
     {"error": "api_mismatch", "client_version": "570.86.15", "line_end": 4}),
])
def test_a_driver_that_did_not_come_up_is_a_record_with_its_reason(lines: list[str], expect: dict[str, Any]) -> None:
    (rec,) = parse(lines)
    assert (rec.kind, rec.category) == ("driver_error", "driver")
    for key, want in expect.items():
        got = getattr(rec, key) if key in ("pci", "line_end") else rec.details.get(key)
        assert got == want, (key, got)


def test_a_notice_cut_short_is_no_record_and_takes_nothing_with_it() -> None:
    assert parse(["NVRM: The NVIDIA GPU 0000:04:00.0 (PCI ID: 10de:1b38)"]) == []


# -- root-port AER reports that name no NVIDIA device --------------------------------------------

PORT_REPORT = [
    "[ 50.1] pcieport 0000:40:03.1: AER: Uncorrectable (Non-Fatal) error message received from 0000:41:00.0",
    "[ 50.1] pcieport 0000:41:00.0: PCIe Bus Error: severity=Uncorrectable (Non-Fatal), type=Transaction Layer, "
    "(Requester ID)",
    "[ 50.1] pcieport 0000:41:00.0:   device [1000:c030] error status/mask=00004000/00000000",
    "[ 50.1] pcieport 0000:41:00.0:    [14] CmpltTO                (First)",
    "[ 50.2] pci 0000:42:08.0: AER: can't recover (no error_detected callback)",
    "[ 50.3] pcieport 0000:41:00.0: AER: Downstream Port link has been reset (0)",
    "[ 50.3] pcieport 0000:41:00.0: AER: device recovery failed",
]


def test_a_ports_report_is_kept_as_the_ports_with_its_recovery_lines() -> None:
    (rec,) = parse(PORT_REPORT)
    assert (rec.kind, rec.pci, rec.source_pci, rec.line, rec.line_end) == (
        "pcie_aer", "0000:40:03.1", "0000:41:00.0", 1, 7)
    assert (rec.details["subject"], rec.details["severity"], rec.details["errors"]) == ("port", "non-fatal",
                                                                                       ["CmpltTO"])
    assert rec.device is None  # which GPU is below the port is the inventory's to say
    assert rec.category == "hardware"


@pytest.mark.parametrize("named", [
    "[ 50.2] igb 0000:42:00.0: AER: can't recover (no error_detected callback)",
    "[ 50.1] mpt3sas 0000:41:00.0: PCIe Bus Error: severity=Uncorrectable (Non-Fatal), type=Transaction Layer, "
    "(Requester ID)",
])
def test_a_report_that_names_another_drivers_device_is_not_kept(named: str) -> None:
    lines = [*PORT_REPORT[:1], named]
    assert [r for r in parse(lines) if r.kind == "pcie_aer"] == []


def test_a_port_report_that_names_a_gpu_below_is_the_gpus() -> None:
    lines = [*PORT_REPORT[:4], "[ 50.2] nvidia 0000:42:00.0: AER: can't recover (no error_detected callback)"]
    (rec,) = parse(lines)
    assert (rec.details["subject"], rec.details["affected"], rec.device) == ("gpu", ["0000:42:00.0"], "0000:41:00.0")


def test_the_ports_later_report_is_dropped_once_it_served_another_drivers_device() -> None:
    first = ["pcieport 0000:00:1c.0: AER: Uncorrected (Fatal) error received: 0000:00:1c.0",
             "pcieport 0000:00:1c.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
             "(Receiver ID)",
             "r8169 0000:03:00.0: AER: can't recover (no error_detected callback)"]
    later = ["pcieport 0000:00:1c.0: AER: Corrected error received: 0000:00:1c.0"]
    assert parse(first + later) == []
    assert brief(parse(later), "kind", "details.subject") == [("pcie_aer", "port")]


# -- redacted and empty identities ----------------------------------------------------------------

@pytest.mark.parametrize(("lines", "uuid", "serial", "states"), [
    (["NVRM: GPU at PCI:0000:65:00: GPU-<REDACTED>"], None, None, {"uuid_state": "redacted"}),
    (["NVRM: GPU at PCI:0000:65:00: GPU-9f3e11aa-XXXX-XXXX-XXXX-XXXXXXXXXXXX"], None, None,
     {"uuid_state": "redacted"}),
    (["NVRM: GPU at PCI:0000:65:00: GPU-9f3e11aa-0b0c-4d4e-8f8a-112233445566", "NVRM: GPU Board Serial Number: "],
     "GPU-9f3e11aa-0b0c-4d4e-8f8a-112233445566", None, {"serial_state": "empty"}),
    (["NVRM: GPU at PCI:0000:65:00: GPU-9f3e11aa-0b0c-4d4e-8f8a-112233445566 | |",
      "NVRM: GPU Board Serial Number: | |"], "GPU-9f3e11aa-0b0c-4d4e-8f8a-112233445566", None,
     {"serial_state": "empty"}),
    (["NVRM: GPU at 0000:65:00: GPU-9f3e11aa-0b0c-4d4e-8f8a-112233445566"], "GPU-9f3e11aa-0b0c-4d4e-8f8a-112233445566",
     None, {}),
    (["NVRM: GPU is on Board ."], None, None, {"serial_state": "empty"}),
    (["NVRM: GPU is on Board 1321918044718."], None, "1321918044718", {}),
    (["NVRM: GPU Board Serial Number: [serial removed]"], None, None, {"serial_state": "redacted"}),
])
def test_identity_values_that_are_no_values_are_never_read_as_values(
        lines: list[str], uuid: str | None, serial: str | None, states: dict[str, str]) -> None:
    (rec,) = parse(lines)
    assert (rec.kind, rec.gpu_uuid, rec.serial) == ("gpu_identity", uuid, serial)
    assert {k: rec.details.get(k) for k in states} == states


# -- pasted lines ------------------------------------------------------------------------------------

def test_messages_joined_in_one_line_are_read_one_by_one() -> None:
    joined = ("Feb 3 01:02:03 gpu7 kernel: [ 10.5] NVRM: Xid (PCI:0000:17:00): 63, pid=5, name=a, Row Remapper "
              "Feb 3 01:02:04 gpu7 kernel: [ 11.5] NVRM: Xid (PCI:0000:18:00): 64, pid=6, name=b, Failed "
              "[Mon Feb  3 01:02:05 2025] NVRM: GPU 0000:19:00.0: RmInitAdapter failed! (0x24:0x72:1568)")
    records = parse([joined])
    assert brief(records, "line", "kind", "xid", "pci", "pid") == [
        (1, "xid", 63, "0000:17:00.0", 5), (1, "xid", 64, "0000:18:00.0", 6), (1, "driver_error", None, "0000:19:00.0",
                                                                              None)]
    assert [r.uptime_s for r in records[:2]] == [10.5, 11.5]
    assert all(r.raw in joined and r.raw.count("NVRM:") == 1 for r in records)


def test_one_message_per_line_is_not_split() -> None:
    line = "NVRM: API mismatch: the client has the version 1, but NVRM: this kernel module has the version 2."
    assert split_messages(line) == [line]


@pytest.mark.parametrize(("pasted", "clean"), [
    ("pid=&#39;&lt;unknown&gt;&#39; | |", "pid='<unknown>'"),
    ("name=my\\_job\\*", "name=my_job*"),
    ("pid=\u2018<unknown>\u2019,\u00a0name", "pid='<unknown>', name"),
    ("Xid (PCI:0000:01:00): 79 |", "Xid (PCI:0000:01:00): 79"),
    ("&#55;&#57;", "&#55;&#57;"),  # digits are read only where they are written as digits
])
def test_repair_undoes_what_pages_do_to_a_line(pasted: str, clean: str) -> None:
    assert repair(pasted) == clean
