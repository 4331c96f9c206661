"""Each kernel-log source stamps its lines with the kernel's clock (`event_at`), apart from the read time."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agents.kernlog.base import SourceLine
from agents.kernlog.filetail import FileSource
from agents.kernlog.journald import JournaldSource
from agents.kernlog.kmsg import KmsgSource, read_boot_time
from tests.agents.conftest import JOURNAL_REMOTE
from tests.agents.kmsg_records import XID79, record
from xidpipe.cli import build_parser
from xidpipe.commands.agent import settings_from_args

BOOT_A = "6f3b2a8e-0c51-4d7e-9a53-0d8a1f0e2b11"
BOOT_B = "a1b2c3d4-0000-4000-8000-123456789abc"
BOOT_TIME = datetime(2026, 11, 25, 9, 46, 40, tzinfo=UTC)


def _lines(items: object) -> list[SourceLine]:
    return [i for i in items if isinstance(i, SourceLine)]  # type: ignore[attr-defined]


def test_kmsg_event_time_is_monotonic_time_plus_boot_time(tmp_path: Path) -> None:
    stream, boot = tmp_path / "kmsg", tmp_path / "boot_id"
    boot.write_text(BOOT_A + "\n")
    stream.write_bytes(record(7, "eth0: up", ts=4_200_000) + record(8, XID79, prio=3, ts=30_000_000_123))
    calls: list[str] = []

    def boot_time() -> datetime:
        calls.append("read")
        return BOOT_TIME

    lines = _lines(KmsgSource(stream, boot, None, follow=False, boot_time=boot_time).items())
    assert [(ln.seq, ln.event_at) for ln in lines] == [
        (7, BOOT_TIME + timedelta(seconds=4.2)),
        (8, BOOT_TIME + timedelta(seconds=30_000, microseconds=123)),
    ]
    assert all(ln.boot_time == BOOT_TIME for ln in lines)
    assert calls == ["read"]  # once per boot, not per record


def test_kmsg_reads_the_boot_time_again_after_a_reboot(tmp_path: Path) -> None:
    stream, boot = tmp_path / "kmsg", tmp_path / "boot_id"
    boot.write_text(BOOT_A + "\n")
    stream.write_bytes(record(0, "a", ts=1_000_000) + record(1, "b", ts=2_000_000))
    second_boot = BOOT_TIME + timedelta(days=2)
    times = iter([BOOT_TIME, second_boot])
    it = KmsgSource(stream, boot, None, follow=True, boot_time=lambda: next(times)).items()
    first = [next(i for i in it if i is not None) for _ in range(2)]
    boot.write_text(BOOT_B + "\n")
    with open(stream, "ab") as fh:
        fh.write(record(0, XID79, ts=5_000_000))
    after = next(i for i in it if i is not None)
    assert isinstance(after, SourceLine) and all(isinstance(x, SourceLine) for x in first)
    assert after.boot_id == BOOT_B and after.event_at == second_boot + timedelta(seconds=5)
    assert first[1].event_at == BOOT_TIME + timedelta(seconds=2)  # type: ignore[union-attr]


def test_kmsg_without_a_readable_boot_time_leaves_the_event_time_unknown(tmp_path: Path) -> None:
    stream, boot = tmp_path / "kmsg", tmp_path / "boot_id"
    boot.write_text(BOOT_A + "\n")
    stream.write_bytes(record(3, XID79, ts=9_000_000))
    (line,) = _lines(KmsgSource(stream, boot, None, follow=False, boot_time=lambda: None).items())
    assert (line.event_at, line.boot_time, line.monotonic_us) == (None, None, 9_000_000)
    assert read_boot_time(tmp_path / "no-such-stat") is None
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3 4\nbtime 1795600000\n")
    assert read_boot_time(stat) == datetime.fromtimestamp(1795600000, UTC)


# journalctl -o json entries as recorded on a node (gpu-node-05 of the sample cluster).
JOURNAL = [
    {"__CURSOR": "s=5c1e0a;i=1000", "__REALTIME_TIMESTAMP": "1795600004000000", "__MONOTONIC_TIMESTAMP": "4000000",
     "_BOOT_ID": "9d1f6c2b7a4e4c0f8e3d2a1b0c9d8e7f", "_TRANSPORT": "kernel", "PRIORITY": "4",
     "SYSLOG_FACILITY": "0",
     "MESSAGE": "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05"},
    {"__CURSOR": "s=5c1e0a;i=1005", "__REALTIME_TIMESTAMP": "1795632404250000",
     "__MONOTONIC_TIMESTAMP": "32404250000", "_BOOT_ID": "9d1f6c2b7a4e4c0f8e3d2a1b0c9d8e7f",
     "_TRANSPORT": "kernel", "PRIORITY": "3",
     "SYSLOG_FACILITY": "0", "MESSAGE": "NVRM: Xid (PCI:0000:18:00): 119, pid=1234, name=python3, Timeout"},
]


def test_journald_event_time_is_the_realtime_stamp(tmp_path: Path) -> None:
    recorded = tmp_path / "journal.json"
    recorded.write_text("".join(json.dumps(e) + "\n" for e in JOURNAL))
    fake = tmp_path / "journalctl"  # prints the recording as `journalctl -o json` would
    fake.write_text(f"#!/bin/sh\ncat {recorded}\n")
    os.chmod(fake, 0o755)
    lines = _lines(JournaldSource(None, journalctl=str(fake), follow=False).items())
    boot = datetime.fromtimestamp(1795600000, UTC)
    assert [(ln.event_at, ln.monotonic_us, ln.boot_time) for ln in lines] == [
        (datetime.fromtimestamp(1795600004, UTC), 4_000_000, boot),
        (datetime.fromtimestamp(1795632404.25, UTC), 32_404_250_000, boot),
    ]


def test_journald_from_a_real_journal_file(tmp_path: Path) -> None:
    if not JOURNAL_REMOTE.exists():
        pytest.skip("systemd-journal-remote is not installed")
    export = "".join(
        f"__CURSOR=s=0;i={i}\n__REALTIME_TIMESTAMP={1795600000000000 + i * 1_000_000}\n"
        f"__MONOTONIC_TIMESTAMP={i * 1_000_000}\n_BOOT_ID=0123456789abcdef0123456789abcdef\n_TRANSPORT=kernel\n"
        f"MESSAGE={XID79}\n\n" for i in range(1, 4))
    journal = tmp_path / "kernel.journal"
    subprocess.run([str(JOURNAL_REMOTE), f"--output={journal}", "-"], input=export.encode(), check=True,
                   capture_output=True)
    lines = _lines(JournaldSource(None, journal_file=journal, follow=False).items())
    assert [ln.event_at for ln in lines] == [datetime.fromtimestamp(1795600000 + i, UTC) for i in range(1, 4)]


def test_file_lines_carry_their_own_stamp_or_uptime_plus_the_boot_time(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text(
        "[    4.200000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024\n"
        "[30000.000000] NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error\n"
    )
    replayed = _lines(FileSource(log, None, follow=False, boot_time=BOOT_TIME).items())
    assert [ln.event_at for ln in replayed] == [BOOT_TIME + timedelta(seconds=4.2),
                                                datetime(2026, 11, 25, 18, 6, 40, tzinfo=UTC)]
    assert all(ln.boot_time == BOOT_TIME for ln in replayed)
    assert [ln.event_at for ln in _lines(FileSource(log, None, follow=False).items())] == [None, None]

    syslog = tmp_path / "kern.log"
    syslog.write_text("Nov 25 09:46:43 gpu-node-02 kernel: [    3.900000] NVRM: loading\n"
                      "[Wed Nov 25 10:01:54 2026] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n")
    before = datetime.now(UTC)
    stamped = _lines(FileSource(syslog, None, follow=False).items())
    year = before.year if before.date() >= datetime(before.year, 11, 23).date() else before.year - 1
    assert [ln.event_at for ln in stamped] == [datetime(year, 11, 25, 9, 46, 43, tzinfo=UTC),
                                               datetime(2026, 11, 25, 10, 1, 54, tzinfo=UTC)]


def test_boot_time_option(tmp_path: Path) -> None:
    args = build_parser().parse_args(["agent", "--source", "file", "--log-file", str(tmp_path / "k.log"),
                                      "--boot-time", "2026-11-25T09:46:40Z", "--no-nvml"])
    assert settings_from_args(args).boot_time == BOOT_TIME
    assert settings_from_args(build_parser().parse_args(["agent", "--no-nvml"])).boot_time is None


def test_the_demo_replays_gpu_node_04_on_its_own_day(tmp_path: Path) -> None:
    from models.event_time import boot_times
    from xidpipe.demo import agent_command, sample_dir, sample_state

    boots = boot_times(sample_state())
    assert set(boots) == {"gpu-node-04"}  # the one node whose log has only uptime stamps
    log = sample_dir() / "gpu-node-04.log"
    command = agent_command(log, "gpu-node-04", "k:9092", tmp_path, boots["gpu-node-04"])
    settings = settings_from_args(build_parser().parse_args(command[3:]))
    assert settings.boot_time == boots["gpu-node-04"]
    lines = _lines(FileSource(log, None, follow=False, boot_time=settings.boot_time).items())
    storm = {ln.event_at.date() for ln in lines if "Xid" in ln.message and ln.event_at is not None}
    assert storm == {datetime(2026, 11, 25).date()}
