"""Wait for changes in a directory with Linux inotify (through libc via ctypes), falling back to
plain polling where inotify is not available."""

from __future__ import annotations

import ctypes
import logging
import os
import select
import time
from pathlib import Path

log = logging.getLogger(__name__)

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
DIR_EVENTS = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE


class DirectoryWaiter:
    """`wait(timeout)` returns when something in the directory changed, or after the timeout."""

    def __init__(self, directory: Path, fallback_poll_s: float = 0.05, min_interval_s: float = 0.0) -> None:
        """`min_interval_s`: return at most this often, so a writer that appends in many small
        writes wakes us once per interval instead of once per write (bounds CPU, adds that much
        latency at most)."""
        self._fd: int | None = None
        self._fallback = fallback_poll_s
        self._min_interval = min_interval_s
        self._last = 0.0
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd < 0:
                raise OSError(ctypes.get_errno(), "inotify_init1")
            if libc.inotify_add_watch(fd, os.fsencode(directory), DIR_EVENTS) < 0:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, f"inotify_add_watch {directory}")
            self._fd = fd
        except (OSError, AttributeError) as exc:
            log.info("inotify unavailable; polling the file instead", extra={"error": str(exc)})

    def wait(self, timeout_s: float) -> None:
        if self._fd is None:
            time.sleep(min(timeout_s, self._fallback))
            return
        pause = self._min_interval - (time.monotonic() - self._last)
        if pause > 0:
            time.sleep(pause)
        ready, _, _ = select.select([self._fd], [], [], timeout_s)
        self._last = time.monotonic()
        if ready:
            try:
                while os.read(self._fd, 65536):
                    pass
            except BlockingIOError:
                pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
