"""The node state a batch attributes faults with, read from node_states and kept between batches.

A history starts `history_s` before the earliest fault (by event time) it attributes, and includes
the snapshot of each kind that was valid at that start."""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from cachetools import LRUCache
from sqlalchemy.orm import Session

from history.tables import NodeState
from models.correlate import IdentityLine, InventorySnapshot, NodeHistory, PodSnapshot, ProcessSnapshot
from models.node_records import DeviceAssignment, GpuInfo, GpuProcess

# Snapshot kinds (each replaces the one before); identity lines are facts of their own and are not.
_SNAPSHOT_KINDS = ("inventory", "pods", "processes")

# Per node: (highest node_state id, start, history) of the last history loaded, for the nodes that
# faulted most recently (a history of 8 GPUs with pods and processes holds tens of KB; a node past
# the bound is read from node_states again at its next fault).
HistoryCache = LRUCache[str, tuple[int, datetime, NodeHistory]]
HISTORIES_KEPT = 2_000


def history_cache(size: int = HISTORIES_KEPT) -> HistoryCache:
    return LRUCache(maxsize=size)


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
            return cached[2]
        rows = [*self._before(node, start), *self.s.scalars(
            sa.select(NodeState).where(NodeState.node == node, NodeState.valid_from >= start)
            .order_by(NodeState.valid_from, NodeState.id)
        )]
        h = NodeHistory(node)
        for r in rows:
            p = r.payload
            if r.kind == "inventory":
                h.inventories.append(InventorySnapshot(r.valid_from, tuple(GpuInfo.model_validate(g)
                                                                           for g in p.get("gpus", []))))
            elif r.kind == "identity":
                h.identities.append(IdentityLine(r.valid_from, p["pci"], p.get("uuid"), p.get("serial")))
            elif r.kind == "pods":
                h.pods.append(PodSnapshot(r.valid_from, tuple(DeviceAssignment.model_validate(a)
                                                              for a in p.get("assignments", []))))
            elif r.kind == "processes":
                h.processes.append(ProcessSnapshot(r.valid_from, tuple(GpuProcess.model_validate(x)
                                                                       for x in p.get("processes", []))))
        h.sort()
        self.cache[node] = (top, start, h)
        return h

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
