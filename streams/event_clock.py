"""Incidents resolved in event time: each node's clock is the latest fault its kernel log reported.

A node's kernel log arrives in the order it was written (its partition, its log), so once a node
reports a fault at `t`, none of its faults before `t` is still to come. (NVML events travel on a
topic of their own, read at its own pace: they do not move the clock.) An incident of that node (a GPU's,
an NVSwitch's, the node's driver) whose last fault is more than `quiet_period_s` before its node's
clock is over: it is resolved, at its last fault plus the quiet period, whichever batch brought the
clock there, so the stream and `xidpipe replay` resolve the same incidents at the same times. A
workload's incident spans nodes: it is resolved once the clock of every node it faulted on has
passed its quiet period. (The worker's sweep also resolves incidents quiet for that long in arrival
time, for nodes that stay silent: `streams.store.Store.sweep`.)

`NodeClocks` keeps the clocks of the nodes seen lately between transactions (an LRU, cleared after a
rollback); a node it does not hold is read from its latest stored fault event.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import FaultEvent, Incident

_CLOCKS_REMEMBERED = 100_000  # nodes whose clock is kept between transactions

NODE_LOCAL = ("gpu", "nvswitch", "node")


class NodeClocks:
    """Per node: the event time of the latest fault its kernel log reported (see the module)."""

    def __init__(self) -> None:
        self._clocks: OrderedDict[str, datetime] = OrderedDict()

    def clear(self) -> None:
        self._clocks.clear()

    def read(self, s: Session, nodes: Iterable[str]) -> dict[str, datetime]:
        """The clocks of `nodes` (a node without a stored fault has none)."""
        wanted = set(nodes)
        out = {n: self._clocks[n] for n in wanted if n in self._clocks}
        missing = sorted(wanted - out.keys())
        if missing:
            with s.no_autoflush:
                for node, latest in s.execute(sa.select(FaultEvent.node, sa.func.max(FaultEvent.occurred_at))
                                              .where(FaultEvent.node.in_(missing), FaultEvent.sources != "nvml")
                                              .group_by(FaultEvent.node)):
                    if latest is not None:
                        out[node] = self._remember(node, latest)
        return out

    def advance(self, s: Session, latest: dict[str, datetime]) -> dict[str, datetime]:
        """Move the clocks of the nodes that reported faults up to the latest of each; returns them."""
        clocks = self.read(s, latest)
        for node, at in latest.items():
            if node not in clocks or at > clocks[node]:
                clocks[node] = self._remember(node, at)
        return clocks

    def _remember(self, node: str, at: datetime) -> datetime:
        self._clocks[node] = at
        self._clocks.move_to_end(node)
        while len(self._clocks) > _CLOCKS_REMEMBERED:
            self._clocks.popitem(last=False)
        return at


def quiet_incidents(s: Session, clocks: NodeClocks, advanced: dict[str, datetime],
                    quiet_period_s: float) -> list[Incident]:
    """The open incidents the clocks of `advanced` nodes show quiet for longer than the quiet period:
    those of the nodes themselves, and the workloads' whose every node is past it. Rows another
    transaction is changing are skipped (the next batch of their nodes finds them)."""
    if not advanced:
        return []
    quiet = timedelta(seconds=quiet_period_s)
    out: list[Incident] = []
    with s.no_autoflush:
        for row in s.scalars(sa.select(Incident).where(
                Incident.status == "open", Incident.component.in_(NODE_LOCAL), Incident.node.in_(sorted(advanced)),
                Incident.last_seen < max(advanced.values()) - quiet).with_for_update(skip_locked=True)):
            if row.last_seen + quiet < advanced[row.node]:
                out.append(row)
        workloads = list(s.scalars(sa.select(Incident).where(
            Incident.status == "open", Incident.component == "workload",
            Incident.last_seen < max(advanced.values()) - quiet).with_for_update(skip_locked=True)))
        if workloads:
            nodes: dict[str, set[str]] = {}
            for incident_id, node in s.execute(sa.select(FaultEvent.incident_id, FaultEvent.node).distinct().where(
                    FaultEvent.incident_id.in_([r.incident_id for r in workloads]))):
                nodes.setdefault(str(incident_id), set()).add(node)
            known = clocks.read(s, {n for ns in nodes.values() for n in ns})
            for row in workloads:
                spans = nodes.get(row.incident_id, set())
                if spans and all(n in known and row.last_seen + quiet < known[n] for n in spans):
                    out.append(row)
    return out
