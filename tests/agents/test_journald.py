import subprocess
import time
from pathlib import Path

import pytest

from agents.kernlog.base import SourceLine, SourceSkip
from agents.kernlog.journald import JournaldSource
from tests.agents.conftest import JOURNAL_REMOTE, require_tool

BOOT = "0123456789abcdef0123456789abcdef"
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def _export_entry(i: int, message: str, transport: str = "kernel") -> str:
    return (
        f"__CURSOR=s=0;i={i}\n__REALTIME_TIMESTAMP={1764400000000000 + i * 1000}\n"
        f"__MONOTONIC_TIMESTAMP={5_000_000 + i}\n_BOOT_ID={BOOT}\n_TRANSPORT={transport}\n"
        f"PRIORITY=3\nSYSLOG_FACILITY=0\nSYSLOG_IDENTIFIER=kernel\n_KERNEL_SUBSYSTEM=pci\n"
        f"_KERNEL_DEVICE=+pci:0000:3b:00.0\nMESSAGE={message}\n\n"
    )


@pytest.fixture
def journal_file(tmp_path: Path) -> Path:
    tool = require_tool(JOURNAL_REMOTE, "systemd-journal-remote")
    require_tool("journalctl", "systemd")
    export = "".join(
        _export_entry(i, XID if i % 3 == 0 else f"eth0: link event {i}",
                      transport="kernel" if i != 4 else "syslog")
        for i in range(1, 13)
    )
    out = tmp_path / "kernel.journal"
    subprocess.run([tool, f"--output={out}", "-"], input=export.encode(), check=True, capture_output=True)
    return out


def test_reads_kernel_entries_and_resumes_after_cursor(journal_file: Path) -> None:
    src = JournaldSource(None, journal_file=journal_file, follow=False)
    lines = [i for i in src.items() if isinstance(i, SourceLine)]
    assert len(lines) == 11  # the syslog entry is not a kernel line
    xid = lines[2]
    assert xid.message == XID and xid.boot_id == BOOT and xid.priority == 3
    assert xid.continuation["_KERNEL_DEVICE"] == "+pci:0000:3b:00.0"
    assert xid.record_id == f"journald:{xid.journal_cursor}"

    again = JournaldSource(lines[5].cursor, journal_file=journal_file, follow=False)
    rest = [i for i in again.items() if isinstance(i, SourceLine)]
    assert [r.message for r in rest] == [ln.message for ln in lines[6:]]


def test_follow_mode_yields_idle_markers_and_stops_on_close(journal_file: Path) -> None:
    src = JournaldSource(None, journal_file=journal_file, follow=True)
    it = src.items()
    seen = idle = 0
    deadline = time.monotonic() + 20
    while seen < 11 or idle < 2:  # every entry, then the source keeps following (idle markers)
        assert time.monotonic() < deadline
        if next(it) is None:
            idle += 1 if seen == 11 else 0
        else:
            seen += 1
    assert seen == 11
    src.close()
    with pytest.raises(StopIteration):
        next(it)


def test_lines_user_space_wrote_into_kmsg_are_dropped_and_counted(tmp_path: Path) -> None:
    # journald keeps a line written into /dev/kmsg from user space as a kernel-transport entry of
    # facility user (1): it reads exactly like the driver's line otherwise.
    tool = require_tool(JOURNAL_REMOTE, "systemd-journal-remote")
    require_tool("journalctl", "systemd")
    export = _export_entry(1, XID) + _export_entry(2, XID).replace("SYSLOG_FACILITY=0", "SYSLOG_FACILITY=1") \
        + _export_entry(3, "eth0: up")
    journal = tmp_path / "forged.journal"
    subprocess.run([tool, f"--output={journal}", "-"], input=export.encode(), check=True, capture_output=True)
    foreign: list[int] = []
    src = JournaldSource(None, journal_file=journal, follow=False,
                         on_foreign=lambda: foreign.append(1))
    items = [i for i in src.items() if i is not None]
    lines = [i for i in items if isinstance(i, SourceLine)]
    assert [ln.message for ln in lines] == [XID, "eth0: up"]
    assert [ln.record_id.split("i=")[1].split(";")[0] for ln in lines] == ["1", "3"]
    assert len(foreign) == 1
    skipped = [i for i in items if isinstance(i, SourceSkip)]
    assert len(skipped) == 1 and skipped[0].messages == [] and "i=2" in skipped[0].cursor["cursor"]
