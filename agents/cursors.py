"""The source cursor, persisted only up to what is handled: published lines once Kafka acknowledged
them (and everything before), filtered-out lines once everything before them was acknowledged."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from agents.statefile import read_json, write_json_atomic

Cursor = dict[str, Any]

_JOURNAL = re.compile(r"(?:^|;)s=([0-9a-f]+);i=([0-9a-f]+)")


def later_cursor(a: Cursor | None, b: Cursor | None) -> Cursor | None:
    """The cursor further along, when the two are comparable; else `a` (the persisted one)."""
    if a is None or b is None:
        return a or b
    if "seq" in a and "seq" in b:
        if a.get("boot_id") == b.get("boot_id"):
            return a if a["seq"] >= b["seq"] else b
        return a
    if "offset" in a and "offset" in b:
        if a.get("inode") == b.get("inode"):
            return a if a["offset"] >= b["offset"] else b
        return a
    if "cursor" in a and "cursor" in b:
        ma, mb = _JOURNAL.search(str(a["cursor"])), _JOURNAL.search(str(b["cursor"]))
        if ma and mb and ma.group(1) == mb.group(1):
            return a if int(ma.group(2), 16) >= int(mb.group(2), 16) else b
        return a
    return a


class CursorTracker:
    def __init__(self, path: Path, flush_interval_s: float = 1.0) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._pending: deque[list[Any]] = deque()  # [spool number or None, cursor]
        self._committed: Cursor | None = None
        self._dirty = False
        self._last_flush = 0.0
        self._interval = flush_interval_s

    def load(self) -> Cursor | None:
        data = read_json(self._path)
        return data if isinstance(data, dict) else None

    def note(self, number: int | None, cursor: Cursor) -> None:
        """A line was handled: spooled as `number`, or (None) needed no publishing."""
        with self._lock:
            if number is None:
                if not self._pending:
                    self._committed, self._dirty = cursor, True
                elif self._pending[-1][0] is None:
                    self._pending[-1][1] = cursor
                else:
                    self._pending.append([None, cursor])
            else:
                self._pending.append([number, cursor])

    def acked_through(self, number: int) -> None:
        with self._lock:
            while self._pending and (self._pending[0][0] is None or self._pending[0][0] <= number):
                self._committed = self._pending.popleft()[1]
                self._dirty = True
        self.flush()

    def maybe_flush(self) -> None:
        if time.monotonic() - self._last_flush >= self._interval:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if not self._dirty or self._committed is None:
                return
            data, self._dirty = dict(self._committed), False
            write_json_atomic(self._path, data)
            self._last_flush = time.monotonic()

    @property
    def committed(self) -> Cursor | None:
        with self._lock:
            return self._committed
