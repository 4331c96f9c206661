"""The cluster's nodes as a list+watch keeps them (the informer pattern), for the breaker's pool counts.

Per node it keeps only what the counts need: the node's resourceVersion, its pool (the value of one
label), whether it is unschedulable and whether xidpipe holds its cordon (`xidpipe.io/cordoned-at`
and `spec.unschedulable`); per pool, the number of nodes and of xidpipe's cordons. A decision then
counts its pool without listing it.

- list: a consistent list, paginated (`limit`/`continue`), read as raw JSON; the watch starts at the
  list's resourceVersion.
- watch: `watch=true` with bookmarks (`allowWatchBookmarks`), raw JSON events, resumed from the
  last event or bookmark after its timeout or a dropped connection; relisted on 410 Gone (the
  resourceVersion left the server's window).
- `observe`: the adapter's own writes enter at once, ahead of their watch event (a relist keeps an
  entry newer than its snapshot).
- `pool_counts(pool, fresh_as_of)`: the counts once the cache reflects every node write up to the
  resourceVersion `fresh_as_of`, waiting at most `timeout`; None when it does not (the caller lists
  instead). Fresh means the watch got there, or `fresh_as_of` is at most this adapter's own newest
  cordon: cordons are decided and written one at a time under the action record's lock, and a cordon
  of ours counts as a mark only when the counts of its decision came from here, fresh as of every
  cordon recorded before it (a decision that listed the pool instead leaves the mark where it was).

resourceVersions are compared as integers (etcd revisions; comparable since Kubernetes 1.35).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from models.cordon import ANN_CORDONED_AT
from respond.cordon.port import NodeRead

log = logging.getLogger(__name__)

GONE = 410


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


@dataclass(frozen=True, slots=True)
class Entry:
    version: int
    pool: str | None  # the pool label's value; None without the label
    unschedulable: bool
    ours: bool  # cordoned by xidpipe: our annotation on an unschedulable node


def version_of(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


def entry_of(raw: dict[str, Any], pool_label: str) -> Entry:
    """The entry of a node as the API serves it (raw JSON)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    unschedulable = bool(spec.get("unschedulable"))
    return Entry(version_of(meta.get("resourceVersion")), (meta.get("labels") or {}).get(pool_label), unschedulable,
                 unschedulable and ANN_CORDONED_AT in (meta.get("annotations") or {}))


class NodeCache:
    def __init__(self, core: client.CoreV1Api, pool_label: str, *, page_size: int = 500,
                 watch_timeout_s: int = 240, retry_s: float = 1.0) -> None:
        self.core = core
        self.pool_label = pool_label
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.retry_s = retry_s
        self._changed = threading.Condition()
        self._nodes: dict[str, Entry] = {}
        self._sizes: Counter[str | None] = Counter()
        self._held: Counter[str | None] = Counter()
        self._watermark = 0  # every node write up to here is reflected
        self._own_cordons = 0  # the newest cordon this adapter wrote, decided on counts from here
        self._armed = False  # the last counts were fresh: the next own cordon may move the mark
        self._synced = False
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self.relists = 0

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> NodeCache:
        self._thread = threading.Thread(target=self._run, name=f"node-cache[{self.pool_label}]", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        # Closing the response would wait for its reader; shutting its socket down ends the read.
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._changed:
            self._changed.notify_all()

    def _run(self) -> None:
        version = 0
        while not self._stopped.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._watch(version)
            except Gone:
                log.info("node watch expired at resourceVersion %s: listing again", version)
                version = 0
            except Exception as exc:
                if self._stopped.is_set():
                    return
                log.warning("node cache: %s; retrying in %.1f s", exc, self.retry_s)
                self._stopped.wait(self.retry_s)

    # --- list and watch ---------------------------------------------------------------------------

    def _relist(self) -> int:
        nodes: dict[str, Entry] = {}
        token: str | None = None
        version = 0
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            response: Any = self.core.list_node(**kwargs)
            page = json.loads(response.data)
            for raw in page.get("items") or []:
                nodes[raw["metadata"]["name"]] = entry_of(raw, self.pool_label)
            meta = page.get("metadata") or {}
            version = version or version_of(meta.get("resourceVersion"))
            token = meta.get("continue")
            if not token:
                break
        with self._changed:
            # Our own writes newer than the snapshot stay until their watch event arrives.
            nodes.update({name: e for name, e in self._nodes.items() if e.version > version})
            self._nodes = nodes
            self._sizes = Counter(e.pool for e in nodes.values())
            self._held = Counter(e.pool for e in nodes.values() if e.ours)
            self._watermark = max(self._watermark, version)
            self._synced = True
            self.relists += 1
            self._changed.notify_all()
        return version

    def _watch(self, version: int) -> int:
        response: Any = self.core.list_node(
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
        at = version_of((raw.get("metadata") or {}).get("resourceVersion"))
        with self._changed:
            if kind == "DELETED":
                self._put(raw["metadata"]["name"], None)
            elif kind in ("ADDED", "MODIFIED"):
                self._put(raw["metadata"]["name"], entry_of(raw, self.pool_label))
            self._watermark = max(self._watermark, at)
            self._changed.notify_all()
        return max(version, at)

    def _put(self, name: str, entry: Entry | None) -> None:
        old = self._nodes.get(name)
        if old is not None and entry is not None and old.version >= entry.version:
            return
        if old is not None:
            self._sizes[old.pool] -= 1
            self._held[old.pool] -= int(old.ours)
        if entry is None:
            self._nodes.pop(name, None)
            return
        self._nodes[name] = entry
        self._sizes[entry.pool] += 1
        self._held[entry.pool] += int(entry.ours)

    # --- reads and our own writes -----------------------------------------------------------------

    def observe(self, node: NodeRead, *, own_cordon: bool = False) -> None:
        """A node this adapter just wrote, as the API server answered the write."""
        view = node.view
        entry = Entry(version_of(node.resource_version), view.labels.get(self.pool_label), view.unschedulable,
                      view.unschedulable and view.cordoned_by_xidpipe)
        with self._changed:
            self._put(view.name, entry)
            if own_cordon:
                if self._armed:
                    self._own_cordons = max(self._own_cordons, entry.version)
                self._armed = False

    def pool_counts(self, pool: str, fresh_as_of: int, timeout: float) -> tuple[int, int] | None:
        """(nodes, nodes cordoned by xidpipe) of `pool` ("": the nodes without the pool label), reflecting
        every node write up to `fresh_as_of`; None when the cache does not get there within `timeout`."""
        key = pool or None
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._fresh(fresh_as_of):
                left = deadline - time.monotonic()
                if left <= 0 or self._stopped.is_set():
                    self._armed = False
                    return None
                self._changed.wait(left)
            self._armed = True
            return self._sizes[key], self._held[key]

    def pool_members(self, pool: str) -> dict[str, bool]:
        """The nodes of `pool` ("": the nodes without the pool label), each with whether xidpipe holds its
        cordon (the quarantine's counts join them with the GPUs of each node)."""
        key = pool or None
        with self._changed:
            return {name: e.ours for name, e in self._nodes.items() if e.pool == key}

    def _fresh(self, version: int) -> bool:
        return self._synced and (version <= self._watermark or version <= self._own_cordons)

    def entry(self, name: str) -> Entry | None:
        with self._changed:
            return self._nodes.get(name)

    @property
    def watermark(self) -> int:
        with self._changed:
            return self._watermark
