"""A plain kernel log file (`/var/log/kern.log`), followed across rotation.

Position is (inode, byte offset). Rotation by rename is seen as a new inode at the path: the old
file is drained first, then the new one is read from the start. copytruncate is seen as the file
shrinking below our offset: reading restarts at 0 and a `truncated` gap is reported (lines written
between the copy and the truncation are lost by design of copytruncate). A restart that finds a
different inode at the path looks for the old inode at `<path>.1` and drains it first.

`replay_rate` (lines per second) paces the reading for demos and benchmarks.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from agents.kernlog.base import SourceGap, SourceItem, SourceLine
from agents.statefile import read_json
from models.node_records import KernelSource

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1
MAX_LINE = 64 * 1024


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
    ) -> None:
        self._path = path
        self._cursor = cursor or {}
        self._follow = follow
        self._interval = 1.0 / replay_rate if replay_rate else 0.0
        self._next_emit = time.monotonic()
        self._fh: BinaryIO | None = None

    @staticmethod
    def load_cursor(path: Path) -> dict[str, Any] | None:
        data = read_json(path)
        return data if isinstance(data, dict) else None

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

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
        """Complete lines from `offset` to the current end of `fh`."""
        fh.seek(offset)
        while True:
            line = fh.readline(MAX_LINE)
            if not line:
                return
            if not line.endswith(b"\n") and len(line) < MAX_LINE:
                fh.seek(offset)  # partial line: wait for the writer to finish it
                return
            start = offset
            offset += len(line)
            self._pace()
            digest = content_hash(line)
            yield SourceLine(
                source="file",
                message=line.rstrip(b"\r\n").decode("utf-8", "replace"),
                record_id=f"file:{digest}:{start}",
                cursor={"path": str(path), "inode": inode, "offset": offset},
                file_path=str(path),
                file_offset=start,
                content_hash=digest,
            )

    def items(self) -> Iterator[SourceItem | None]:
        saved_inode = self._cursor.get("inode")
        offset = int(self._cursor.get("offset", 0))
        opened = None
        while opened is None:
            opened = self._open(self._path)
            if opened is None:
                if not self._follow:
                    return
                yield None
                time.sleep(IDLE_POLL_S)
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
            time.sleep(IDLE_POLL_S)
