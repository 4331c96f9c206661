"""The node state a batch attributes faults with, read from node_states and kept between batches.

A history starts `history_s` before the earliest fault (by event time) it attributes, and includes
the snapshot of each kind that was valid at that start.

Between batches a history is kept compact (`CompactHistory`): each snapshot's items as the JSON of
their fields that differ from the defaults, consecutive snapshots with the same items sharing one
text, validated into a `NodeHistory` again at each use. Validated, a snapshot of 8 GPUs takes 10 to 26 KB of pydantic
objects; as JSON, 1 to 2 KB."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from cachetools import LRUCache
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from history.tables import NodeState
from models.correlate import (
    IdentityLine,
    InventorySnapshot,
    NodeHistory,
    PodSnapshot,
    ProcessSnapshot,
    WorkloadSnapshot,
)
from models.node_records import DeviceAssignment, GpuInfo, GpuProcess, PodWorkload

# Snapshot kinds (each replaces the one before); identity lines are facts of their own and are not.
_SNAPSHOT_KINDS = ("inventory", "pods", "processes", "workloads")
_GPUS = TypeAdapter(tuple[GpuInfo, ...])
_ASSIGNMENTS = TypeAdapter(tuple[DeviceAssignment, ...])
_PROCESSES = TypeAdapter(tuple[GpuProcess, ...])
_WORKLOADS = TypeAdapter(tuple[PodWorkload, ...])
_ITEMS: dict[str, tuple[str, TypeAdapter[Any]]] = {
    "inventory": ("gpus", _GPUS), "pods": ("assignments", _ASSIGNMENTS), "processes": ("processes", _PROCESSES),
    "workloads": ("pods", _WORKLOADS),
}
_ENTRY_BYTES = 120  # a snapshot's time and its tuple, besides its (shared) JSON
_IDENTITY_BYTES = 400  # an identity line with its strings

_T = TypeVar("_T")

Snapshots = tuple[tuple[datetime, bytes], ...]  # (taken at, items as JSON), in time order


@dataclass(frozen=True, slots=True)
class CompactHistory:
    """A node's history as the cache keeps it; `size`: about the bytes it holds."""

    node: str
    inventories: Snapshots
    identities: tuple[IdentityLine, ...]
    pods: Snapshots
    processes: Snapshots
    size: int
    workloads: Snapshots = ()

    def expand(self) -> NodeHistory:
        """The history, validated (each distinct JSON once: snapshots that repeat share their items)."""
        return NodeHistory(
            self.node,
            inventories=[InventorySnapshot(at, gpus) for at, gpus in _validated(_GPUS, self.inventories)],
            identities=list(self.identities),
            pods=[PodSnapshot(at, a) for at, a in _validated(_ASSIGNMENTS, self.pods)],
            processes=[ProcessSnapshot(at, p) for at, p in _validated(_PROCESSES, self.processes)],
            workloads=[WorkloadSnapshot(at, w) for at, w in _validated(_WORKLOADS, self.workloads)],
        )


def _validated(adapter: TypeAdapter[tuple[_T, ...]],
               snapshots: Snapshots) -> Iterator[tuple[datetime, tuple[_T, ...]]]:
    done: dict[bytes, tuple[_T, ...]] = {}
    for at, raw in snapshots:
        items = done.get(raw)
        if items is None:
            items = done[raw] = adapter.validate_json(raw)
        yield at, items


def compact(node: str, rows: list[NodeState]) -> CompactHistory:
    """The history of a node's state rows (any order): its snapshots in time order, each as the JSON of
    its validated items, a snapshot whose items repeat the one before it sharing its text."""
    snapshots: dict[str, list[tuple[datetime, bytes]]] = {kind: [] for kind in _SNAPSHOT_KINDS}
    identities: list[IdentityLine] = []
    held = 0
    for r in sorted(rows, key=lambda r: r.valid_from):  # stable: rows of one time keep their order
        p = r.payload
        if r.kind == "identity":
            identities.append(IdentityLine(r.valid_from, p["pci"], p.get("uuid"), p.get("serial")))
        elif r.kind in _ITEMS:
            key, adapter = _ITEMS[r.kind]
            raw = adapter.dump_json(adapter.validate_python(p.get(key, [])), exclude_defaults=True)
            same = snapshots[r.kind]
            if same and same[-1][1] == raw:
                raw = same[-1][1]
            else:
                held += len(raw)
            same.append((r.valid_from, raw))
    entries = sum(len(s) for s in snapshots.values())
    return CompactHistory(node, tuple(snapshots["inventory"]), tuple(identities), tuple(snapshots["pods"]),
                          tuple(snapshots["processes"]),
                          size=held + _ENTRY_BYTES * entries + _IDENTITY_BYTES * len(identities),
                          workloads=tuple(snapshots["workloads"]))


# Per node: (highest node_state id, start, history) of the last history loaded, for the nodes that
# faulted most recently, up to about HISTORY_BYTES_KEPT bytes of compact histories (8 GPUs with their
# pods and processes: about 5 KB; a node past the bound is read from node_states again at its next
# fault). The bound is in bytes, not nodes: a history grows with its node's snapshots over `history_s`.
HistoryCache = LRUCache[str, tuple[int, datetime, CompactHistory]]
HISTORY_BYTES_KEPT = 16 * 2**20


def history_cache(size: int = HISTORY_BYTES_KEPT) -> HistoryCache:
    return LRUCache(maxsize=size, getsizeof=lambda entry: entry[2].size)


class NodeHistories:
    """Node histories for one transaction; a cached history serves while its node has no new state row."""

    def __init__(self, s: Session, cache: HistoryCache, history_s: float) -> None:
        self.s = s
        self.cache = cache
        self.history_s = history_s
        self._tops: dict[str, int] = {}  # per node: the highest node_state id

    def since(self, node: str, since: datetime) -> NodeHistory:
        """The node's state from `since` minus the history span."""
        start = since - timedelta(seconds=self.history_s)
        if node not in self._tops:
            self.load_tops({node})
        top = self._tops[node]
        cached = self.cache.get(node)
        if cached is not None and cached[0] == top and cached[1] <= start:
            return cached[2].expand()
        rows = [*self._before(node, start), *self.s.scalars(
            sa.select(NodeState).where(NodeState.node == node, NodeState.valid_from >= start)
            .order_by(NodeState.valid_from, NodeState.id)
        )]
        h = compact(node, rows)
        if h.size <= self.cache.maxsize:  # one history past the whole bound is not kept
            self.cache[node] = (top, start, h)
        else:
            self.cache.pop(node, None)
        return h.expand()
    def _before(self, node: str, start: datetime) -> list[NodeState]:
        """The snapshot of each kind still valid at `start`: the latest taken before it. Pod assignments
        are published only when they change, so a job that has run for longer than the history span
        is known only from a snapshot older than it."""
        latest = [  # one per kind, each on the (node, valid_from) index, in one round trip
            sa.select(sa.select(NodeState.id).where(NodeState.node == node, NodeState.kind == kind,
                                                    NodeState.valid_from < start)
                      .order_by(NodeState.valid_from.desc(), NodeState.id.desc()).limit(1).subquery())
            for kind in _SNAPSHOT_KINDS
        ]
        rows = {r.kind: r for r in self.s.scalars(sa.select(NodeState).where(NodeState.id.in_(sa.union_all(*latest))))}
        return [rows[kind] for kind in _SNAPSHOT_KINDS if kind in rows]

    def load_tops(self, nodes: set[str]) -> None:
        """The highest node_state id of each node (the key of its cached history), in one query."""
        nodes = nodes - set(self._tops)
        if not nodes:
            return
        found: dict[str, int] = {}
        tops = sa.select(NodeState.node, sa.func.max(NodeState.id)).where(NodeState.node.in_(nodes))
        for node, top in self.s.connection().execute(tops.group_by(NodeState.node)):
            found[node] = int(top or 0)
        for node in nodes:
            self._tops[node] = found.get(node, 0)
