import base64
import gzip
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from agents.evidence import EvidenceCollector, FaultContext, parse_fault_line, redact_argv, redact_text
from agents.metrics import Metrics
from agents.signals.nvml.cgroup import parse_cgroup
from models.node_records import Evidence, NodeRecord
from tests.polling import poll

CID = "3f1b9c0d2e4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344"


def _data(item: object) -> bytes:
    return gzip.decompress(base64.b64decode(item.data))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("line", "want"), [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.", ("0000:3b:00.0", 79, 1234)),
    ("NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable", ("0000:3b:00.0", 48, None)),
    ("NVRM: GPU at PCI:0000:5e:00: GPU-1c7e4c02", ("0000:5e:00.0", None, None)),
    ("eth0: link up", (None, None, None)),
])
def test_parse_fault_line(line: str, want: tuple[object, ...]) -> None:
    assert parse_fault_line(line) == want


def test_redaction() -> None:
    argv = ["python", "train.py", "--api-key", "s3cr3t", "--hf_token=hf_abcdef", "PASSWORD=hunter2", "--lr=0.1"]
    out = redact_argv(argv)
    assert out == ["python", "train.py", "--api-key", "[REDACTED]", "--hf_token=[REDACTED]",
                   "PASSWORD=[REDACTED]", "--lr=0.1"]
    assert redact_text("Authorization: Bearer abcdefghijklmnop") == "Authorization: [REDACTED]"


@pytest.mark.parametrize(("text", "want"), [
    (f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1f2e3d4c_5b6a_4978_8695_a4b3c2d1e0f9.slice/cri-containerd-{CID}.scope",
     (CID, "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9")),
    (f"12:devices:/kubepods/burstable/pod1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9/{CID}\n11:cpu:/kubepods/burstable",
     (CID, "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9")),
    (f"0::/system.slice/docker-{CID}.scope", (CID, None)),
    ("0::/user.slice/user-1000.slice/session-2.scope", (None, None)),
])
def test_parse_cgroup(text: str, want: tuple[object, ...]) -> None:
    assert parse_cgroup(text) == want


def _collector(sink: list[NodeRecord], tmp_path: Path, **kw: object) -> EvidenceCollector:
    return EvidenceCollector(node="n1", publish=sink.append, metrics=Metrics(), proc_root=tmp_path,
                             **kw)  # type: ignore[arg-type]


def test_capture_caps_size_times_out_and_marks_absent_tools(tmp_path: Path) -> None:
    slow = tmp_path / "slow-smi"
    slow.write_text(f"#!{sys.executable}\nimport time, sys\nprint('x' * 5000, flush=True)\ntime.sleep(30)\n")
    slow.chmod(0o755)
    c = _collector([], tmp_path, nvidia_smi=str(slow), lspci="lspci-absent", timeout_s=0.5, max_bytes=1000)
    for i in range(5):
        c.observe_line(f"line {i}")
    began = time.monotonic()
    ev = c.capture(FaultContext("kmsg:b:1", "0000:3b:00.0", None, 79, None))
    assert time.monotonic() - began < 5
    items = {i.name: i for i in ev.items}
    assert items["nvidia-smi-q"].status == "timeout" and items["nvidia-smi-q"].truncated
    assert items["nvidia-smi-q"].size_bytes == 1000 and len(_data(items["nvidia-smi-q"])) == 1000
    assert items["lspci"].status == "absent"
    assert _data(items["kernel-log"]).decode().splitlines() == [f"line {i}" for i in range(5)]


def test_at_most_one_dossier_per_gpu_per_window(tmp_path: Path) -> None:
    sink: list[NodeRecord] = []
    c = _collector(sink, tmp_path, nvidia_smi="absent-smi", lspci="absent-lspci", window_s=60, follow_s=0.1)
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    c.on_kernel_fault("r1", line)
    c.on_kernel_fault("r2", line)
    c.on_kernel_fault("r3", line.replace("3b:00", "5e:00"))
    poll("two captures", lambda: len(sink) >= 2, 10, interval=0.02)
    time.sleep(0.1)
    assert sorted(e.pci_bus_id for e in sink if isinstance(e, Evidence)) == ["0000:3b:00.0", "0000:5e:00.0"]
    assert c._metrics.get("xidpipe_agent_evidence_suppressed_total") == 1


def _huge(path: Path, size: int, head: bytes) -> None:
    """A sparse file of `size` bytes starting with `head` (zeros after it: no disk used)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)


def test_a_huge_command_line_or_cgroup_is_read_only_up_to_its_bound(tmp_path: Path) -> None:
    """A tenant controls its process's argv: /proc/<pid>/cmdline is read up to PROC_READ_MAX, never whole."""
    from agents.procfs import PROC_READ_MAX

    _huge(tmp_path / "4242" / "cmdline", 256 * 1024 * 1024, b"python3\0--token\0tok-123456\0" + b"a" * 4096)
    _huge(tmp_path / "4242" / "cgroup", 256 * 1024 * 1024, f"0::/system.slice/docker-{CID}.scope\n".encode())
    c = _collector([], tmp_path, nvidia_smi="absent-smi", lspci="absent-lspci", max_bytes=512 * 1024 * 1024)
    began = time.monotonic()
    ev = c.capture(FaultContext("kmsg:b:1", "0000:3b:00.0", None, 13, 4242))
    assert time.monotonic() - began < 5
    items = {i.name: i for i in ev.items}
    cmdline, cgroup = items["process-cmdline"], items["process-cgroup"]
    assert cmdline.truncated and cgroup.truncated
    assert cmdline.size_bytes <= PROC_READ_MAX + 64 and cgroup.size_bytes <= PROC_READ_MAX
    assert _data(cmdline).decode().splitlines()[:3] == ["python3", "--token", "[REDACTED]"]
    assert "tok-123456" not in _data(cmdline).decode()


def test_container_of_reads_a_bounded_cgroup(tmp_path: Path) -> None:
    from agents.signals.nvml.cgroup import container_of

    _huge(tmp_path / "7" / "cgroup", 256 * 1024 * 1024, f"0::/system.slice/docker-{CID}.scope\n".encode())
    began = time.monotonic()
    assert container_of(7, tmp_path) == (CID, None)
    assert time.monotonic() - began < 1.0


def test_boot_id_and_boot_time_are_read_bounded(tmp_path: Path) -> None:
    from agents.kernlog.kmsg import read_boot_id, read_boot_time

    _huge(tmp_path / "boot_id", 256 * 1024 * 1024, b"6b8c1e0a-0d1c-4bb5-9c2a-0f4b2a1c9e77\n")
    _huge(tmp_path / "stat", 256 * 1024 * 1024, b"cpu 1 2 3\nbtime 1764000000\n")
    began = time.monotonic()
    assert read_boot_id(tmp_path / "boot_id") == "6b8c1e0a-0d1c-4bb5-9c2a-0f4b2a1c9e77"
    assert read_boot_time(tmp_path / "stat") is not None
    assert time.monotonic() - began < 1.0


def test_the_kernel_log_window_holds_the_lines_after_the_fault_each_after_its_time_in_utc(tmp_path: Path) -> None:
    """The driver writes a fault's follow-up lines in the seconds after it (Xid 63 after Xid 48): the
    window waits for them, and gives each line its event time in UTC where the source knew it."""
    sink: list[NodeRecord] = []
    c = _collector(sink, tmp_path, nvidia_smi="absent-smi", lspci="absent-lspci", follow_s=1.0)
    at = datetime(2026, 11, 25, 13, 52, 8, tzinfo=timezone(timedelta(hours=1)))
    c.observe_line("xfs filesystem being remounted")
    dbe = "NVRM: Xid (PCI:0000:b7:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error"
    c.observe_line(dbe, at)
    c.on_kernel_fault("r1", dbe)
    c.observe_line("NVRM: Xid (PCI:0000:b7:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row",
                   at + timedelta(seconds=1))
    deadline = time.monotonic() + 10
    while not sink:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    ev = sink[0]
    assert isinstance(ev, Evidence)
    window = _data(next(i for i in ev.items if i.name == "kernel-log")).decode().splitlines()
    assert window == ["xfs filesystem being remounted", f"2026-11-25T12:52:08Z  {dbe}",
                      "2026-11-25T12:52:09Z  NVRM: Xid (PCI:0000:b7:00): 63, pid='<unknown>', name=<unknown>, "
                      "Row Remapper: New row"]
