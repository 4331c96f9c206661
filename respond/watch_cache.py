"""One kind of cluster object as a list+watch keeps it (the informer pattern): the nodes for the
breaker's pool counts (`respond.cordon.node_cache`), the ResourceSlices and xidpipe's DeviceTaintRules
for GPU quarantine (`respond.quarantine.slice_cache`, `respond.quarantine.rule_cache`).

- list: a consistent list, paginated (`limit`/`continue`), read as raw JSON; the watch starts at the
  list's resourceVersion.
- watch: `watch=true` with bookmarks, raw JSON events, resumed from the last event or bookmark after
  its timeout or a dropped connection; listed again on 410 Gone.
- each object is kept as what `digest` makes of its raw JSON (None: not kept); a subclass keeps its
  indexes in `_changed`, called under the cache's lock for every object that changes.
- `observe`/`forget`: the adapter's own writes enter at once, ahead of their watch event.
- `fresh(version, timeout)`: whether every write up to the resourceVersion `version` is reflected
  (the watch got there, or `version` is at most this adapter's own newest write made on fresh
  counts), waiting at most `timeout`; at once False while the first list keeps failing (`failure`).

The client is synchronous; the watch runs in a daemon thread of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar

from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

GONE = 410
T = TypeVar("T")


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


def version_of(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


class WatchCache(Generic[T]):
    """`lister(**kwargs)`: the client's list call for the kind (with its selectors bound)."""

    def __init__(self, name: str, lister: Callable[..., Any], digest: Callable[[dict[str, Any]], T | None], *,
                 page_size: int = 500, watch_timeout_s: int = 240, retry_s: float = 1.0) -> None:
        self.name = name
        self.lister = lister
        self.digest = digest
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.retry_s = retry_s
        self._changed_cv = threading.Condition()
        self._items: dict[str, tuple[int, T]] = {}
        self._deleted: dict[str, int] = {}  # tombstones: an older event of a deleted object is not taken back in
        self._watermark = 0
        self._own = 0  # the newest write of ours made on fresh counts
        self._armed = False
        self._synced = False
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self.relists = 0
        self.failure: str | None = None  # the last list or watch failure, until the next success

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name=f"watch[{self.name}]", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._changed_cv:
            self._changed_cv.notify_all()

    def _run(self) -> None:
        version = 0
        while not self._stopped.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._watch(version)
            except Gone:
                log.info("%s watch expired at resourceVersion %s: listing again", self.name, version)
                version = 0
            except Exception as exc:
                if self._stopped.is_set():
                    return
                with self._changed_cv:
                    self.failure = str(exc)[:300]
                    self._changed_cv.notify_all()
                log.warning("%s cache: %s; retrying in %.1f s", self.name, self.failure, self.retry_s)
                self._stopped.wait(self.retry_s)

    # --- list and watch ---------------------------------------------------------------------------

    def _relist(self) -> int:
        items: dict[str, tuple[int, T]] = {}
        token: str | None = None
        version = 0
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = json.loads(self.lister(**kwargs).data)
            for raw in page.get("items") or []:
                kept = self.digest(raw)
                if kept is not None:
                    items[raw["metadata"]["name"]] = (version_of(raw["metadata"].get("resourceVersion")), kept)
            meta = page.get("metadata") or {}
            version = version or version_of(meta.get("resourceVersion"))
            token = meta.get("continue")
            if not token:
                break
        with self._changed_cv:
            # Our own writes newer than the snapshot stay until their watch event arrives.
            items.update({n: e for n, e in self._items.items() if e[0] > version})
            for name in set(self._items) | set(items):
                old, new = self._items.get(name), items.get(name)
                if old != new:
                    self._changed(name, old[1] if old else None, new[1] if new else None)
            self._items = items
            self._deleted = {n: v for n, v in self._deleted.items() if v > version}
            self._watermark = max(self._watermark, version)
            self._synced = True
            self.failure = None
            self.relists += 1
            self._changed_cv.notify_all()
        return version

    def _watch(self, version: int) -> int:
        response: Any = self.lister(
            watch=True, resource_version=str(version), allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout_s, _preload_content=False,
            _request_timeout=(10, self.watch_timeout_s + 30))
        self._response = response
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self._stopped.is_set():
                    break
                if line:
                    version = self._apply(json.loads(line), version)
        finally:
            self._response = None
            response.close()
            response.release_conn()
        return version

    def _apply(self, event: dict[str, Any], version: int) -> int:
        kind, raw = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if raw.get("code") == GONE:
                raise Gone(raw.get("message", ""))
            raise RuntimeError(f"watch error {raw.get('code')}: {raw.get('message')}")
        meta = raw.get("metadata") or {}
        at = version_of(meta.get("resourceVersion"))
        with self._changed_cv:
            if kind == "DELETED":
                self._put(meta["name"], at, None, deleted=True)
            elif kind in ("ADDED", "MODIFIED"):
                self._put(meta["name"], at, self.digest(raw))
            self._watermark = max(self._watermark, at)
            self._changed_cv.notify_all()
        return max(version, at)

    def _put(self, name: str, version: int, value: T | None, *, deleted: bool = False) -> None:
        old = self._items.get(name)
        if not deleted and ((old is not None and old[0] >= version) or self._deleted.get(name, -1) >= version):
            return
        if deleted:
            self._deleted[name] = max(version, self._deleted.get(name, 0))
        if value is None:
            self._items.pop(name, None)
        else:
            self._items[name] = (version, value)
        if (old[1] if old else None) != value:
            self._changed(name, old[1] if old else None, value)

    def _changed(self, name: str, old: T | None, new: T | None) -> None:
        """An object changed (None: absent); called under the lock. Subclasses keep their indexes here."""

    # --- reads and our own writes -----------------------------------------------------------------

    def observe(self, name: str, version: int, value: T | None, *, own_write: bool = False) -> None:
        """An object this adapter just wrote (None: deleted), as the API server answered the write."""
        with self._changed_cv:
            self._put(name, version, value, deleted=value is None)
            if own_write:
                if self._armed:
                    self._own = max(self._own, version)
                self._armed = False
            self._changed_cv.notify_all()

    def synced(self, timeout: float) -> bool:
        """Whether the first list is in, waiting at most `timeout`."""
        return self.fresh(0, timeout, arm=False)

    def fresh(self, version: int, timeout: float, *, arm: bool = True) -> bool:
        """Whether every write up to `version` is reflected, waiting at most `timeout`; when it is (and
        `arm`), the next own write counts as fresh too."""
        deadline = time.monotonic() + timeout
        with self._changed_cv:
            while not (self._synced and (version <= self._watermark or version <= self._own)):
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped.is_set() or (self.failure is not None and not self._synced):
                    self._armed = False
                    return False
                self._changed_cv.wait(left)
            if arm:
                self._armed = True
            return True

    def get(self, name: str) -> T | None:
        with self._changed_cv:
            entry = self._items.get(name)
            return entry[1] if entry else None

    def values(self) -> list[T]:
        with self._changed_cv:
            return [v for _, v in self._items.values()]

    def items(self) -> list[tuple[str, T]]:
        with self._changed_cv:
            return [(name, v) for name, (_, v) in self._items.items()]

    @property
    def lock(self) -> threading.Condition:
        """Held while reading a subclass's indexes."""
        return self._changed_cv

    @property
    def watermark(self) -> int:
        with self._changed_cv:
            return self._watermark
