"""The fleet view: the same fault family on `fleet_min_nodes` nodes within `fleet_window_s` is one
fleet incident per (cluster, family)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import FaultEvent, FleetIncident, OutboxMessage
from models.incidents import fleet_burst
from models.stream_policy import PipelinePolicy
from streams.outbox import fleet_message

log = logging.getLogger(__name__)

_FLEET_RECHECK_S = 1.0  # how often one family's fleet window is counted again without a new node

# Per fault family: (monotonic time, nodes counted) of the last fleet query.
FleetChecks = dict[str, tuple[float, set[str]]]


class FleetBursts:
    """The fleet families one transaction saw, counted against the fleet window at its end."""

    def __init__(self, s: Session, policy: PipelinePolicy, cluster: str, now: datetime, checked: FleetChecks) -> None:
        self.s = s
        self.p = policy
        self.cluster = cluster
        self.now = now
        self.checked = checked
        self.latest: dict[str, datetime] = {}  # per family: its latest fault of the batch
        self.nodes: dict[str, set[str]] = defaultdict(set)
        self.outbox: list[OutboxMessage] = []

    def note(self, family: str, node: str, at: datetime) -> None:
        """A fault of `family` on `node` at `at` (families outside `fleet_families` are not counted)."""
        if family in self.p.fleet_families:
            self.latest[family] = max(self.latest.get(family, at), at)
            self.nodes[family].add(node)

    def count(self) -> list[OutboxMessage]:
        """Open, update or resolve the fleet incidents of the families seen; returns their messages."""
        for family, at in self.latest.items():
            # The fleet query scans a window of events: once a second per family is enough. A node that was
            # not counted yet joins the nodes of the last count at once, without the query.
            checked = self.checked.get(family)
            nodes = self.nodes[family]
            with self.s.no_autoflush:
                if checked and time.monotonic() - checked[0] < _FLEET_RECHECK_S:
                    if not nodes <= checked[1]:
                        known = checked[1] | nodes
                        self._fleet(family, at, sorted(known))
                        self.checked[family] = (checked[0], known)
                    continue
                self.checked[family] = (time.monotonic(), set(self._fleet(family, at)))
        return self.outbox

    def _fleet(self, family: str, at: datetime, counted: list[str] | None = None) -> list[str]:
        """Open or update the fleet incident of `family`; returns the nodes with faults in the window
        (`counted`, when the caller knows them)."""
        p = self.p
        since = at - timedelta(seconds=p.fleet_window_s)
        nodes = counted if counted is not None else sorted(self.s.scalars(
            sa.select(FaultEvent.node).distinct().where(FaultEvent.family == family, FaultEvent.occurred_at >= since,
                                                        FaultEvent.occurred_at <= at)
        ).all())
        reason = fleet_burst(family, nodes, p)
        if reason is None:
            return nodes
        cluster = self.cluster
        row = self.s.scalars(sa.select(FleetIncident).where(FleetIncident.cluster == cluster,
                                                            FleetIncident.family == family,
                                                            FleetIncident.status == "open")).first()
        if row is not None and row.last_seen < since:
            row.status, row.resolved_at, row.updated_at = "resolved", self.now, self.now
            self.outbox.append(fleet_message(row, "resolved", "a new burst started after the fleet window"))
            self.s.flush()
            row = None
        if row is None:
            row = FleetIncident(fleet_id=f"fleet:{cluster}:{family}@{at.strftime('%Y%m%dT%H%M%S.%fZ')}",
                                cluster=cluster, family=family, status="open", reason=reason, nodes=nodes,
                                first_seen=since, last_seen=at, updated_at=self.now, resolved_at=None)
            self.s.add(row)
            log.warning("fleet incident %s: %s", row.fleet_id, reason, extra={"family": family})
            self.outbox.append(fleet_message(row, "opened", reason))
            return nodes
        merged = sorted(set(row.nodes) | set(nodes))
        row.last_seen = max(row.last_seen, at)
        row.updated_at = self.now
        if merged != sorted(row.nodes):
            row.nodes, row.reason = merged, reason
            self.outbox.append(fleet_message(row, "updated", reason))
        return nodes
