"""journald through `journalctl` subprocesses, resumable by journal cursor.

Every run is `journalctl _TRANSPORT=kernel -o json --no-pager --no-tail`, plus `--cursor=C` to resume
at our own cursor C (the last line Kafka acknowledged). The match `_TRANSPORT=kernel` selects what
`-k` selects without `-k`'s "current boot only".

`--follow` implies "current boot only" too from systemd 250 on (upstream commit 2dd9285bac; boot 0
is the running kernel's for the local journal, the newest boot for `--file`/`--directory`), so a
follow run alone never reads what the previous boot logged after C: often the fault before a crash
and reboot. Hence two runs when there is a cursor:

1. catch-up: without `--follow`, which implies no boot, so every boot after C is read, to the end;
2. follow: `--follow --boot`, from the cursor of the last entry run 1 read (or C). `--boot` is
   explicit so that every version (242-249 have no implication) follows the same boot.

With no cursor (a first start) only the follow run runs: the current boot from its first line.
`--no-follow` (a recorded journal) is the catch-up run alone: every boot, after C when given.

`--cursor=C` starts *at* C's entry, which we drop as already read (its `__CURSOR` equals C); when
that entry does not match the run's filter (C lies in the previous boot) or is gone (its file was
vacuumed), the first entry after C's position is read. `--after-cursor`/`--cursor-file` instead
skip one entry unconditionally before systemd 255 (upstream PR 30336), losing the first line of the
current boot, or the first line left after a vacuum.

Only entries the kernel wrote are passed on (`models.kernlog.origin`): `_TRANSPORT=kernel` and the
kernel facility. A line user space wrote into /dev/kmsg (journald keeps it as a kernel-transport
entry of facility user) is dropped, reported through `on_foreign`, and its cursor still advances.

A line's event time is the entry's `__REALTIME_TIMESTAMP` (when journald received it from the
kernel); `__MONOTONIC_TIMESTAMP` and `_BOOT_ID` order lines within a boot, and realtime minus
monotonic is the boot's time (per entry, so lines of each boot carry their own boot's time).
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
from collections.abc import Callable, Generator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents.kernlog.base import SourceItem, SourceLine, SourceSkip
from models.kernlog.clock import from_epoch_us
from models.kernlog.origin import journal_origin
from models.node_records import KernelSource

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.2


def _entry(raw: bytes) -> dict[str, Any] | None:
    """One `journalctl -o json` line: an entry with its cursor, or None (logged when undecodable)."""
    try:
        entry = json.loads(raw)
    except ValueError:
        log.warning("undecodable journalctl line skipped", extra={"raw": raw[:200].decode("utf-8", "replace")})
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("__CURSOR"), str):
        return None
    return entry


def _message(value: Any) -> str:
    if isinstance(value, list):  # non-UTF-8 messages come as byte arrays
        return bytes(v & 0xFF for v in value if isinstance(v, int)).decode("utf-8", "replace")
    return str(value) if value is not None else ""


class JournaldSource:
    name: KernelSource = "journald"

    def __init__(
        self,
        cursor: dict[str, Any] | None,
        *,
        journalctl: str = "journalctl",
        journal_file: Path | None = None,
        journal_directory: Path | None = None,
        follow: bool = True,
        on_foreign: Callable[[], None] | None = None,
    ) -> None:
        self._cursor = (cursor or {}).get("cursor")
        self._journalctl = journalctl
        self._file = journal_file
        self._directory = journal_directory
        self._follow = follow
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._on_foreign = on_foreign

    def command(self, *, cursor: str | None, follow: bool) -> list[str]:
        """One journalctl run: the catch-up run (`follow=False`) or the follow run."""
        cmd = [self._journalctl, "_TRANSPORT=kernel", "-o", "json", "--no-pager", "--no-tail"]
        if follow:
            cmd += ["--follow", "--boot"]
        if cursor:
            cmd.append(f"--cursor={cursor}")
        if self._file is not None:
            cmd.append(f"--file={self._file}")
        if self._directory is not None:
            cmd.append(f"--directory={self._directory}")
        return cmd

    def close(self) -> None:
        self._closed = True
        self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def items(self) -> Iterator[SourceItem | None]:
        cursor = self._cursor
        if cursor or not self._follow:
            cursor = yield from self._run(self.command(cursor=cursor, follow=False), cursor)
        if self._follow and not self._closed:
            yield from self._run(self.command(cursor=cursor, follow=True), cursor)

    def _run(self, cmd: list[str], start: str | None) -> Generator[SourceItem | None, None, str | None]:
        """Yield what one journalctl run prints after the entry `start`; return the last cursor read."""
        if self._closed:
            return start
        log.info("starting journalctl", extra={"cmd": " ".join(cmd)})
        self._proc = proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buf = b""
        last = start
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], IDLE_POLL_S)
                if not ready:
                    yield None
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    rc = proc.wait()
                    if rc != 0 and self._proc is proc:  # not stopped by close()
                        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
                        raise RuntimeError(f"journalctl exited with {rc}: {err.strip()[:500]}")
                    return last
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    if self._closed:
                        return last
                    entry = _entry(raw) if raw.strip() else None
                    if entry is None or entry["__CURSOR"] == start:  # `--cursor` prints its own entry
                        continue
                    last = entry["__CURSOR"]
                    yield self._item(entry)
        finally:
            self._stop()

    def _item(self, entry: dict[str, Any]) -> SourceLine | SourceSkip:
        cursor: str = entry["__CURSOR"]
        prio = str(entry.get("PRIORITY"))
        fac = entry.get("SYSLOG_FACILITY")
        origin = journal_origin(entry.get("_TRANSPORT"), fac)
        if not origin.kernel:
            log.warning("journal entry not from the kernel dropped",
                        extra={"reason": origin.reason, "raw": _message(entry.get("MESSAGE"))[:200]})
            if self._on_foreign is not None:
                self._on_foreign()
            return SourceSkip({"cursor": cursor}, [])
        # _SOURCE_MONOTONIC_TIMESTAMP: the kernel's own stamp of the record (`models.record_identity`: a
        # copy of it read from kmsg or kern.log is the same report); __MONOTONIC_TIMESTAMP is the journal's.
        cont: dict[str, str] = {k: str(entry[k]) for k in ("_KERNEL_SUBSYSTEM", "_KERNEL_DEVICE",
                                                            "_SOURCE_MONOTONIC_TIMESTAMP") if k in entry}
        mono = str(entry.get("__MONOTONIC_TIMESTAMP"))
        mono_us = int(mono) if mono.isdigit() else None
        realtime = from_epoch_us(entry.get("__REALTIME_TIMESTAMP"))
        boot_time = realtime - timedelta(microseconds=mono_us) if realtime and mono_us is not None else None
        return SourceLine(
            source="journald",
            message=_message(entry.get("MESSAGE")),
            record_id=f"journald:{cursor}",
            cursor={"cursor": cursor},
            boot_id=entry.get("_BOOT_ID"),
            journal_cursor=cursor,
            priority=(int(str(fac)) * 8 + int(prio)) if prio.isdigit() and str(fac).isdigit() else None,
            monotonic_us=mono_us,
            continuation=cont,
            event_at=realtime,
            boot_time=boot_time,
        )
