"""The fleet view: the same fault family on `fleet_min_nodes` nodes within `fleet_window_s` is one
fleet incident per (cluster, family): an incident row of component `fleet` (`models.fleet`),
opened, updated and resolved like any other, with its ticket and its infrastructure message."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.fleet_incidents import latest_fleet, new_fleet_row
from history.incident_index import IncidentIndex
from history.incident_rows import incident_state
from history.tables import FaultEvent, Incident, OutboxMessage
from models.fleet import BREAKER, FLEET, fleet_actions, fleet_change, fleet_quiet
from models.incidents import IncidentChange, fleet_burst
from models.stream_policy import PipelinePolicy
from streams.outbox import action_message, incident_message

log = logging.getLogger(__name__)

_FLEET_RECHECK_S = 1.0  # how often one family's fleet window is counted again without a new node


@dataclass(slots=True)
class FleetCheck:
    """One family's last fleet query: when (monotonic), the window's end, the nodes and codes in it."""

    checked: float
    at: datetime
    nodes: set[str]
    codes: set[str]


FleetChecks = dict[str, FleetCheck]  # per fault family


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
        self.codes: dict[str, set[str]] = defaultdict(set)
        self.outbox: list[OutboxMessage] = []
        self.index = IncidentIndex()

    def note(self, family: str, node: str, at: datetime, code: str | None = None) -> None:
        """A fault of `family` on `node` at `at` (families outside `fleet_families` are not counted)."""
        if family in self.p.fleet_families:
            self.latest[family] = max(self.latest.get(family, at), at)
            self.nodes[family].add(node)
            if code:
                self.codes[family].add(code)

    def count(self) -> list[OutboxMessage]:
        """Open, update or resolve the fleet incidents of the families seen; returns their messages."""
        for family, at in self.latest.items():
            # The fleet query scans a window of events: once a second per family is enough while the faults'
            # own times stay within that second of the last count. A node that was not counted yet joins
            # the nodes of the last count at once, without the query.
            checked = self.checked.get(family)
            nodes = self.nodes[family]
            with self.s.no_autoflush:
                if (checked and time.monotonic() - checked.checked < _FLEET_RECHECK_S
                        and abs((at - checked.at).total_seconds()) < _FLEET_RECHECK_S):
                    if not nodes <= checked.nodes:
                        checked.nodes |= nodes
                        checked.codes |= self.codes[family]
                        self._fleet(family, at, sorted(checked.nodes), sorted(checked.codes), None)
                    continue
                counted, seen, first = self._window(family, at)
                self._fleet(family, at, counted, seen, first)
                self.checked[family] = FleetCheck(time.monotonic(), at, set(counted), set(seen))
        self.index.write(self.s)
        return self.outbox

    def _window(self, family: str, at: datetime) -> tuple[list[str], list[str], datetime | None]:
        """The nodes and codes of `family`'s faults in the fleet window ending at `at`, and its first fault."""
        since = at - timedelta(seconds=self.p.fleet_window_s)
        rows = self.s.execute(
            sa.select(FaultEvent.node, FaultEvent.code, sa.func.min(FaultEvent.occurred_at))
            .where(FaultEvent.family == family, FaultEvent.occurred_at >= since, FaultEvent.occurred_at <= at)
            .group_by(FaultEvent.node, FaultEvent.code)).all()
        nodes = sorted({r[0] for r in rows})
        codes = sorted({r[1] for r in rows} | self.codes[family])
        firsts = [r[2] for r in rows if r[2] is not None]
        return nodes, codes, min(firsts) if firsts else None

    def _fleet(self, family: str, at: datetime, nodes: list[str], codes: list[str], first: datetime | None) -> None:
        """Open, update, or resolve and reopen the fleet incident of `family` for these nodes."""
        reason = fleet_burst(family, nodes, self.p)
        if reason is None:
            return
        row = latest_fleet(self.s, self.cluster, family)
        current = incident_state(row) if row is not None else None
        change = fleet_change(current, list(row.nodes or []) if row is not None else [], cluster=self.cluster,
                              family=family, nodes=nodes, codes=codes, at=at, reason=reason, policy=self.p,
                              first_seen=first)
        if change is None:
            if row is not None:
                row.updated_at = self.now
            return
        if change.resolved_previous is not None and row is not None:
            self._resolve(row, change.resolved_previous.resolved_at or self.now, change.reason)
        inc = change.incident
        if change.kind in ("opened", "reopened"):
            row = new_fleet_row(inc, nodes, self.now, family)
            self.s.add(row)
            log.warning("fleet incident %s %s: %s", inc.incident_id, change.kind, change.reason,
                        extra={"family": family, "incident": inc.incident_id, "cluster": self.cluster})
        else:
            assert row is not None
            row.nodes = sorted(set(row.nodes or []) | set(nodes))
            row.count, row.codes, row.reason = len(row.nodes), list(inc.codes), inc.reason
            row.last_seen, row.updated_at = inc.last_seen, self.now
            row.version += 1
            log.info("fleet incident %s updated: %s", row.incident_id, change.reason,
                     extra={"family": family, "incident": row.incident_id, "cluster": self.cluster})
        for code in inc.codes:
            self.index.add(row.incident_id, code, _xid(code), None)
        self._emit(row, change)

    def _resolve(self, row: Incident, at: datetime, reason: str) -> None:
        row.status, row.resolved_at, row.updated_at = "resolved", at, self.now
        row.version += 1
        self.s.flush()  # the resolved row first: one open incident per fingerprint
        self._emit(row, IncidentChange("resolved", incident_state(row), reason))

    def _emit(self, row: Incident, change: IncidentChange) -> None:
        self.outbox.append(incident_message(row, change.kind, change.reason))
        self.outbox.extend(action_message(a, row) for a in fleet_actions(change))


def sweep_fleet(s: Session, policy: PipelinePolicy, now: datetime) -> list[OutboxMessage]:
    """Resolve the fleet incidents no fault of their family reached for the fleet window (arrival
    time); returns their messages (the incident change and its notification)."""
    before = now - timedelta(seconds=policy.fleet_window_s)
    out: list[OutboxMessage] = []
    for row in s.scalars(sa.select(Incident).where(Incident.component == FLEET, Incident.status == "open",
                                                   Incident.component_id != BREAKER,
                                                   Incident.updated_at <= before)
                         .with_for_update(skip_locked=True)):  # a batch changing one updates it: skipped
        change = fleet_quiet(incident_state(row), row.updated_at, now, policy)
        if change is None:
            continue
        row.status, row.resolved_at, row.updated_at = "resolved", now, now
        row.version += 1
        log.info("fleet incident %s resolved: %s", row.incident_id, change.reason,
                 extra={"incident": row.incident_id, "cluster": row.node, "family": row.family})
        out.append(incident_message(row, "resolved", change.reason))
        out.extend(action_message(a, row) for a in fleet_actions(change))
    return out


def _xid(code: str) -> int | None:
    kind, _, number = code.partition(" ")
    return int(number) if kind == "Xid" and number.isdigit() else None
