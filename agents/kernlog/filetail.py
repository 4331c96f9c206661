"""A plain kernel log file (`/var/log/kern.log`), followed across rotation.

Position is (inode, byte offset). Rotation by rename is seen as a new inode at the path: the old
file is drained first, then the new one is read from the start. copytruncate is seen as the file
shrinking below our offset: reading restarts at 0 and a `truncated` gap is reported (lines written
between the copy and the truncation are lost by design of copytruncate). A restart that finds a
different inode at the path looks for the old inode at `<path>.1` and drains it first.

`replay_rate` (lines per second) paces the reading for demos and benchmarks. A file read once
(`follow=False`: `xidpipe replay`, an agent given `--no-follow`) ends at its last line, with a
trailing newline or without (as `xidpipe parse` and `xidpipe scan` read it); a followed file's
last line waits for its newline.

Only lines the kernel wrote are passed on (`models.kernlog.origin.line_origin`): a syslog file holds
every process's lines, and `logger -t alice 'NVRM: Xid ...'` or an ssh login name reads like a driver
message. A line whose syslog tag is not `kernel`, whose facility is not kern, or a journal entry of
another transport is dropped, reported through `on_foreign` and logged; the cursor passes over it.

A line's event time is its own wall-clock stamp (syslog's, without a year, completed relative to
the time of reading), else its uptime stamp plus `boot_time` when that is given (a recorded raw
`dmesg` replayed with `--boot-time`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from agents.kernlog.base import SourceGap, SourceItem, SourceLine, SourceSkip
from agents.kernlog.inotify import DirectoryWaiter
from models.event_time import line_event_time
from models.kernlog.limits import MAX_LINE_CHARS, TRUNCATED_MARK
from models.kernlog.origin import line_origin
from models.node_records import KernelSource

log = logging.getLogger(__name__)

# With inotify the source wakes when the directory changes, and checks anyway this often (rotation
# on file systems without inotify events); without inotify it polls every FALLBACK_POLL_S.
IDLE_POLL_S = 1.0
FALLBACK_POLL_S = 0.02
MIN_WAKE_INTERVAL_S = 0.025
MAX_LINE = MAX_LINE_CHARS  # bytes of one line; each piece of a longer one ends with TRUNCATED_MARK
CHUNK = 256 * 1024


def content_hash(line: bytes) -> str:
    return hashlib.sha256(line).hexdigest()[:16]


class FileSource:
    name: KernelSource = "file"

    def __init__(
        self,
        path: Path,
        cursor: dict[str, Any] | None,
        *,
        follow: bool = True,
        replay_rate: float | None = None,
        line_filter: Callable[[str], bool] | None = None,
        block_filter: Callable[[str], bool] | None = None,
        boot_time: datetime | None = None,
        on_foreign: Callable[[], None] | None = None,
    ) -> None:
        """`line_filter`: lines it rejects come out in bulk as SourceSkip items. `block_filter`: given
        many lines joined by newlines, False when `line_filter` would reject every one of them.
        `boot_time`: the boot the file's uptime stamps (`[ 1234.567890]`) count from; without it a
        line with only an uptime has no event time. `on_foreign`: called for each line user space wrote."""
        self._path = path
        self._boot_time = boot_time
        self._filter = line_filter
        self._on_foreign = on_foreign
        self._block_filter = block_filter
        self._cursor = cursor or {}
        self._follow = follow
        self._interval = 1.0 / replay_rate if replay_rate else 0.0
        self._next_emit = time.monotonic()
        self._fh: BinaryIO | None = None
        self._waiter: DirectoryWaiter | None = None
        self._cut = False  # the last line passed on was a piece of an overlong line, not its end

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._waiter is not None:
            self._waiter.close()
            self._waiter = None

    def _wait(self) -> None:
        if self._waiter is None:
            self._waiter = DirectoryWaiter(self._path.parent, FALLBACK_POLL_S, MIN_WAKE_INTERVAL_S)
        self._waiter.wait(IDLE_POLL_S)

    def _open(self, path: Path) -> tuple[BinaryIO, int] | None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - kept open across iterations
        except FileNotFoundError:
            return None
        return fh, os.fstat(fh.fileno()).st_ino

    def _pace(self) -> None:
        if not self._interval:
            return
        now = time.monotonic()
        if self._next_emit > now:
            time.sleep(self._next_emit - now)
        self._next_emit = max(self._next_emit + self._interval, time.monotonic() - 1.0)

    def _lines(self, fh: BinaryIO, inode: int, offset: int, path: Path) -> Iterator[SourceItem]:
        """Complete lines from `offset` to the current end of `fh` (read in chunks with pread)."""
        fd = fh.fileno()
        spath = str(path)
        while True:
            # Ask only for what is there: a large pread buffer is an mmap and munmap on every call.
            available = os.fstat(fd).st_size - offset
            if available <= 0:
                return
            data = os.pread(fd, min(CHUNK, available), offset)
            if not data:
                return
            end = data.rfind(b"\n")
            final = False  # the file's last line, without a newline, in a file read once (not followed)
            if end < 0:
                if len(data) < MAX_LINE:
                    if self._follow or len(data) < available:
                        return  # a partial line: wait for the writer to finish it
                    final = True
                lines, ends = [data[:MAX_LINE]], 0  # an overlong line is cut into pieces
            else:
                if self._block_filter is not None and not self._interval:
                    block = data[:end].decode("utf-8", "replace")
                    if not self._block_filter(block):
                        self._cut = False
                        offset += end + 1
                        yield SourceSkip({"path": spath, "inode": inode, "offset": offset},
                                         [ln.rstrip("\r") for ln in block.split("\n")])
                        continue
                lines, ends = data[: end + 1].split(b"\n")[:-1], 1
            skipped: list[str] = []
            keep = self._filter
            for line in lines:
                piece, self._cut = (ends == 0 and not final) or self._cut, ends == 0 and not final
                start = offset
                offset += len(line) + ends
                if self._interval:
                    self._pace()
                text = line.rstrip(b"\r").decode("utf-8", "replace")
                if (keep is not None and not keep(text)) or not self._from_kernel(text, spath, start):
                    skipped.append(text)
                    continue
                if skipped:
                    yield SourceSkip({"path": spath, "inode": inode, "offset": start}, skipped)
                    skipped = []
                digest = content_hash(line + b"\n")
                message = text + (TRUNCATED_MARK if piece else "")
                yield SourceLine(
                    source="file",
                    message=message,
                    record_id=f"file:{digest}:{start}",
                    cursor={"path": spath, "inode": inode, "offset": offset},
                    file_path=spath,
                    file_offset=start,
                    content_hash=digest,
                    event_at=line_event_time(message, read_at=datetime.now(UTC), boot_time=self._boot_time),
                    boot_time=self._boot_time,
                )
            if skipped:
                yield SourceSkip({"path": spath, "inode": inode, "offset": offset}, skipped)

    def _from_kernel(self, text: str, path: str, offset: int) -> bool:
        origin = line_origin(text)
        if origin.kernel:
            return True
        log.warning("log line not from the kernel dropped",
                    extra={"path": path, "offset": offset, "reason": origin.reason, "raw": text[:200]})
        if self._on_foreign is not None:
            self._on_foreign()
        return False

    def items(self) -> Iterator[SourceItem | None]:
        if self._follow and self._waiter is None:  # watch before reading: no change can slip between
            self._waiter = DirectoryWaiter(self._path.parent, FALLBACK_POLL_S, MIN_WAKE_INTERVAL_S)
        saved_inode = self._cursor.get("inode")
        offset = int(self._cursor.get("offset", 0))
        opened = None
        while opened is None:
            opened = self._open(self._path)
            if opened is None:
                if not self._follow:
                    return
                yield None
                self._wait()
        fh, inode = opened
        if saved_inode is not None and saved_inode != inode:
            rotated = Path(f"{self._path}.1")
            old = self._open(rotated)
            if old is not None and old[1] == saved_inode:
                log.info("draining the rotated file first", extra={"path": str(rotated)})
                yield from self._lines(old[0], old[1], offset, rotated)
                old[0].close()
            offset = 0
        self._fh = fh
        while True:
            before = offset
            for item in self._lines(fh, inode, offset, self._path):
                offset = item.cursor["offset"]
                yield item
            if offset != before:
                continue
            # At the end: rotated, truncated, or just idle?
            try:
                st = os.stat(self._path)
            except FileNotFoundError:
                st = None
            size_now = os.fstat(fh.fileno()).st_size
            if st is not None and st.st_ino != inode:
                for item in self._lines(fh, inode, offset, self._path):  # drain the old file
                    offset = item.cursor["offset"]
                    yield item
                fh.close()
                reopened = self._open(self._path)
                if reopened is None:
                    continue
                fh, inode = reopened
                self._fh = fh
                offset = 0
                log.info("followed rotation to a new file", extra={"path": str(self._path), "inode": inode})
                continue
            if size_now < offset:
                log.warning("file truncated (copytruncate): reading from the start",
                            extra={"path": str(self._path)})
                yield SourceGap(
                    source="file",
                    record_id=f"file-truncated:{inode}:{offset}:{time.time_ns()}",
                    cursor={"path": str(self._path), "inode": inode, "offset": 0},
                    reason="truncated",
                    lost=0,
                )
                offset = 0
                continue
            if not self._follow:
                return
            yield None
            self._wait()
