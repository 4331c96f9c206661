"""The agent's node identity: the projected ServiceAccount token the kubelet mounts and keeps fresh.

The DaemonSet projects an audience-bound token (`serviceAccountToken`, audience `xidpipe`) into the
pod; the kubelet rewrites the file before it expires. `NodeToken` re-reads it when the file changes
(and at least every `reread_s`), and the publisher attaches it to every record it sends as the Kafka
header `models.node_identity.TOKEN_HEADER`: the record's bytes stay as they are (no schema change),
and a record that waited in the spool leaves with the token that is valid when it is sent.
The token is a credential: it is never logged.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from models.node_identity import TOKEN_HEADER

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 16 * 1024


class NodeToken:
    def __init__(self, path: Path, *, reread_s: float = 60.0) -> None:
        self.path = path
        self.reread_s = reread_s
        self._lock = threading.Lock()
        self._token: bytes | None = None
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, inode) of what was read
        self._read_at = 0.0
        self._warned = False

    def headers(self) -> list[tuple[str, bytes]]:
        """The header to send with a record: [] while the token cannot be read (the worker refuses such
        records when it verifies identities, and says why)."""
        token = self.current()
        return [(TOKEN_HEADER, token)] if token else []

    def current(self) -> bytes | None:
        with self._lock:
            now = time.monotonic()
            try:
                st = os.stat(self.path)
                stamp = (st.st_mtime_ns, st.st_ino)
                if stamp != self._stamp or now - self._read_at >= self.reread_s:
                    data = self.path.read_bytes()[:MAX_TOKEN_BYTES].strip()
                    self._token, self._stamp, self._read_at = data or None, stamp, now
                    self._warned = False
            except OSError as exc:
                if not self._warned:
                    log.warning("node identity token unreadable; records go without it",
                                extra={"path": str(self.path), "error": type(exc).__name__})
                    self._warned = True
                self._token = None
                self._stamp = None
            return self._token
