"""journald through a `journalctl` subprocess, resumable by journal cursor.

We run `journalctl _TRANSPORT=kernel -o json --follow --no-tail --cursor-file=F`. The match
`_TRANSPORT=kernel` selects what `-k` selects without its implicit "current boot only", so lines
the previous boot logged after our cursor (often the fault that preceded a crash) are still read.
journalctl itself would write the cursor of the last line it *printed*; we want the last line
Kafka *acknowledged*, so F is a scratch copy seeded from our own cursor file at each start.

Only entries the kernel wrote are passed on (`models.kernlog.origin`): `_TRANSPORT=kernel` and the
kernel facility. A line user space wrote into /dev/kmsg (journald keeps it as a kernel-transport
entry of facility user) is dropped, reported through `on_foreign`, and its cursor still advances.

A line's event time is the entry's `__REALTIME_TIMESTAMP` (when journald received it from the
kernel); `__MONOTONIC_TIMESTAMP` and `_BOOT_ID` order lines within a boot, and realtime minus
monotonic is the boot's time.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents.kernlog.base import SourceItem, SourceLine, SourceSkip
from models.kernlog.clock import from_epoch_us
from models.kernlog.origin import journal_origin
from models.node_records import KernelSource

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.2


def _message(value: Any) -> str:
    if isinstance(value, list):  # non-UTF-8 messages come as byte arrays
        return bytes(v & 0xFF for v in value if isinstance(v, int)).decode("utf-8", "replace")
    return str(value) if value is not None else ""


class JournaldSource:
    name: KernelSource = "journald"

    def __init__(
        self,
        cursor: dict[str, Any] | None,
        scratch_cursor_file: Path,
        *,
        journalctl: str = "journalctl",
        journal_file: Path | None = None,
        journal_directory: Path | None = None,
        follow: bool = True,
        on_foreign: Callable[[], None] | None = None,
    ) -> None:
        self._cursor = (cursor or {}).get("cursor")
        self._scratch = scratch_cursor_file
        self._journalctl = journalctl
        self._file = journal_file
        self._directory = journal_directory
        self._follow = follow
        self._proc: subprocess.Popen[bytes] | None = None
        self._on_foreign = on_foreign

    def command(self) -> list[str]:
        cmd = [self._journalctl, "_TRANSPORT=kernel", "-o", "json", "--no-pager", "--no-tail",
               f"--cursor-file={self._scratch}"]
        if self._follow:
            cmd.append("--follow")
        if self._file is not None:
            cmd.append(f"--file={self._file}")
        if self._directory is not None:
            cmd.append(f"--directory={self._directory}")
        return cmd

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def items(self) -> Iterator[SourceItem | None]:
        self._scratch.parent.mkdir(parents=True, exist_ok=True)
        if self._cursor:
            self._scratch.write_text(self._cursor)
        else:
            self._scratch.unlink(missing_ok=True)
        cmd = self.command()
        log.info("starting journalctl", extra={"cmd": " ".join(cmd)})
        self._proc = proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buf = b""
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
                    return
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    if raw.strip():
                        item = self._item(raw)
                        if item is not None:
                            yield item
        finally:
            self.close()

    def _item(self, raw: bytes) -> SourceLine | SourceSkip | None:
        try:
            entry = json.loads(raw)
        except ValueError:
            log.warning("undecodable journalctl line skipped", extra={"raw": raw[:200].decode("utf-8", "replace")})
            return None
        cursor = entry.get("__CURSOR")
        if not isinstance(cursor, str):
            return None
        prio = entry.get("PRIORITY")
        fac = entry.get("SYSLOG_FACILITY")
        origin = journal_origin(entry.get("_TRANSPORT"), fac)
        if not origin.kernel:
            log.warning("journal entry not from the kernel dropped",
                        extra={"reason": origin.reason, "raw": _message(entry.get("MESSAGE"))[:200]})
            if self._on_foreign is not None:
                self._on_foreign()
            return SourceSkip({"cursor": cursor}, [])
        cont = {k: str(entry[k]) for k in ("_KERNEL_SUBSYSTEM", "_KERNEL_DEVICE") if k in entry}
        mono = entry.get("__MONOTONIC_TIMESTAMP")
        mono_us = int(mono) if str(mono).isdigit() else None
        realtime = from_epoch_us(entry.get("__REALTIME_TIMESTAMP"))
        boot_time = realtime - timedelta(microseconds=mono_us) if realtime and mono_us is not None else None
        return SourceLine(
            source="journald",
            message=_message(entry.get("MESSAGE")),
            record_id=f"journald:{cursor}",
            cursor={"cursor": cursor},
            boot_id=entry.get("_BOOT_ID"),
            journal_cursor=cursor,
            priority=(int(fac) * 8 + int(prio)) if str(prio).isdigit() and str(fac).isdigit() else None,
            monotonic_us=mono_us,
            continuation=cont,
            event_at=realtime,
            boot_time=boot_time,
        )
