"""Small JSON state files written atomically: temp file, fsync, rename.

The rename is atomic, so a reader sees the old or the new content, never a torn file. The
directory is not fsynced on every write (that doubles the cost on a path taken for every Kafka
acknowledgement): after a power loss the previous state may come back, which only means records
are read again, and those are dropped by their record id downstream.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    payload = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_json(path: Path) -> Any | None:
    """The file's JSON, or None when it is absent or unreadable (a torn write is never visible)."""
    try:
        return json.loads(path.read_bytes())
    except (FileNotFoundError, ValueError):
        return None
