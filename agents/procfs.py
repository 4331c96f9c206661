"""Bounded reads of files under /proc.

What a process puts in its own `/proc/<pid>/cmdline` is the tenant's to choose (an argv of megabytes),
and a read of a /proc file returns whatever the kernel generates, however long: every read of one is
held to a bound, so a hostile process can cost the agent neither memory nor time. A file longer than
its bound is cut there and said to be cut.
"""

from __future__ import annotations

from pathlib import Path

PROC_READ_MAX = 64 * 1024  # bytes of a command line or cgroup file: far past any real one, cheap to redact
PROC_SMALL_MAX = 4 * 1024  # bytes of a one-value file (boot id)
PROC_STAT_MAX = 1024 * 1024  # bytes of /proc/stat (one line per CPU and an interrupt count line before btime)
_CHUNK = 64 * 1024


def read_bounded(path: Path, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of `path` and whether it held more. Reads in chunks (a /proc file
    returns a page or so per read) and stops one byte past the bound. Raises OSError as open() does."""
    chunks: list[bytes] = []
    got = 0
    with open(path, "rb", buffering=0) as fh:
        while got <= limit:
            data = fh.read(min(_CHUNK, limit + 1 - got))
            if not data:
                break
            chunks.append(data)
            got += len(data)
    out = b"".join(chunks)
    return out[:limit], len(out) > limit


def read_text(path: Path, limit: int) -> str:
    """At most `limit` bytes of `path` as text (invalid UTF-8 replaced)."""
    return read_bounded(path, limit)[0].decode("utf-8", "replace")
