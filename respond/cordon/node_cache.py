"""The cluster's nodes as a list+watch keeps them (the informer pattern), for the breaker's pool counts.

Per node it keeps only what the counts need: the node's resourceVersion, its pool (the value of one
label), whether it is unschedulable and whether xidpipe holds its cordon (`xidpipe.io/cordoned-at`
and `spec.unschedulable`); per pool, the number of nodes and of xidpipe's cordons. A decision then
counts its pool without listing it.

The list, the watch, resuming, listing again on 410 Gone and the freshness mark are the one list+watch
cache's (`respond.watch_cache.WatchCache`); this one keeps the pool counts as nodes change.

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

from collections import Counter
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from models.cordon import ANN_CORDONED_AT
from respond.cordon.port import NodeRead
from respond.watch_cache import Gone, WatchCache, version_of

__all__ = ["Entry", "Gone", "NodeCache", "entry_of", "version_of"]


@dataclass(frozen=True, slots=True)
class Entry:
    version: int
    pool: str | None  # the pool label's value; None without the label
    unschedulable: bool
    ours: bool  # cordoned by xidpipe: our annotation on an unschedulable node


def entry_of(raw: dict[str, Any], pool_label: str) -> Entry:
    """The entry of a node as the API serves it (raw JSON)."""
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    unschedulable = bool(spec.get("unschedulable"))
    return Entry(version_of(meta.get("resourceVersion")), (meta.get("labels") or {}).get(pool_label), unschedulable,
                 unschedulable and ANN_CORDONED_AT in (meta.get("annotations") or {}))


class NodeCache(WatchCache[Entry]):
    def __init__(self, core: client.CoreV1Api, pool_label: str, *, page_size: int = 500,
                 watch_timeout_s: int = 240, retry_s: float = 1.0) -> None:
        self.core = core
        self.pool_label = pool_label
        self._sizes: Counter[str | None] = Counter()
        self._held: Counter[str | None] = Counter()
        super().__init__(f"node[{pool_label}]", core.list_node, lambda raw: entry_of(raw, pool_label),
                         page_size=page_size, watch_timeout_s=watch_timeout_s, retry_s=retry_s)

    def _changed(self, name: str, old: Entry | None, new: Entry | None) -> None:
        if old is not None:
            self._sizes[old.pool] -= 1
            self._held[old.pool] -= int(old.ours)
        if new is not None:
            self._sizes[new.pool] += 1
            self._held[new.pool] += int(new.ours)

    # --- reads and our own writes -----------------------------------------------------------------

    def observe_node(self, node: NodeRead, *, own_cordon: bool = False) -> None:
        """A node this adapter just wrote, as the API server answered the write."""
        view = node.view
        version = version_of(node.resource_version)
        entry = Entry(version, view.labels.get(self.pool_label), view.unschedulable,
                      view.unschedulable and view.cordoned_by_xidpipe)
        self.observe(view.name, version, entry, own_write=own_cordon)

    def pool_counts(self, pool: str, fresh_as_of: int, timeout: float) -> tuple[int, int] | None:
        """(nodes, nodes cordoned by xidpipe) of `pool` ("": the nodes without the pool label), reflecting
        every node write up to `fresh_as_of`; None when the cache does not get there within `timeout`."""
        key = pool or None
        with self.lock:  # the counts as of the moment freshness holds
            if not self.fresh(fresh_as_of, timeout):
                return None
            return self._sizes[key], self._held[key]

    def pool_members(self, pool: str) -> dict[str, bool]:
        """The nodes of `pool` ("": the nodes without the pool label), each with whether xidpipe holds its
        cordon (the quarantine's counts join them with the GPUs of each node)."""
        key = pool or None
        return {name: e.ours for name, e in self.items() if e.pool == key}

    def entry(self, name: str) -> Entry | None:
        return self.get(name)
