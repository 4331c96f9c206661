"""The fleet view: the same fault family on `fleet_min_nodes` nodes within `fleet_window_s` is one
fleet incident per (cluster, family): an incident row of component `fleet` (`models.fleet`),
opened, updated and resolved like any other, with its ticket and its infrastructure message."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.fleet_incidents import fleet_faults, latest_fleet, lock_fleet_counts, new_fleet_row
from history.incident_index import IncidentIndex
from history.incident_rows import incident_state
from history.tables import Incident, OutboxMessage
from models.actions import action_requests
from models.fleet import (
    BREAKER,
    FLEET,
    FleetFault,
    fleet_absorbed,
    fleet_burst_around,
    fleet_change,
    fleet_fingerprint,
    fleet_quiet,
    fleet_reach,
)
from models.incidents import IncidentChange, IncidentState
from models.stream_policy import PipelinePolicy
from models.vocabulary import CodeKind, stored_code
from streams.outbox import action_message, incident_message

log = logging.getLogger(__name__)

_Span = tuple[datetime, datetime]


class FleetBursts:
    """The fleet families' faults one transaction stored, counted in event time at its end.

    Per family, under `lock_fleet_counts`: the faults within the reach of its open fleet incident join
    it (`models.fleet.fleet_absorbed`); around the others, the family's faults in the database are
    counted (`models.fleet.fleet_burst_around`), which may open, join or reopen the incident; then the
    incident takes the stored faults within its reach, again as long as its span grows. So an incident
    gets every node of its family within its reach, whichever batch read which fault."""

    def __init__(self, s: Session, policy: PipelinePolicy, cluster: str, now: datetime) -> None:
        self.s = s
        self.p = policy
        self.cluster = cluster
        self.now = now
        self.faults: dict[str, list[FleetFault]] = defaultdict(list)  # per family: the batch's faults
        self.outbox: list[OutboxMessage] = []
        self.index = IncidentIndex()

    def note(self, family: str, node: str, at: datetime, code: str | None = None) -> None:
        """A fault of `family` on `node` at `at` (families outside `fleet_families` are not counted)."""
        if family in self.p.fleet_families:
            self.faults[family].append(FleetFault(node, code or "", at))

    def count(self) -> list[OutboxMessage]:
        """Open, update or resolve the fleet incidents of the families seen; returns their messages."""
        if self.faults:
            lock_fleet_counts(self.s, [fleet_fingerprint(self.cluster, f) for f in self.faults])
        for family in sorted(self.faults):
            with self.s.no_autoflush:
                self._family(family, self.faults[family])
        self.index.write(self.s)
        return self.outbox

    def _family(self, family: str, faults: list[FleetFault]) -> None:
        """Count the batch's `faults` of `family` and write what they change of its fleet incident."""
        row = latest_fleet(self.s, self.cluster, family)
        current = incident_state(row) if row is not None else None
        nodes = [str(n) for n in row.nodes or []] if row is not None else []
        state, change, covered = current, None, None
        if current is not None and current.status == "open":
            covered = fleet_reach(current, self.p)  # its stored faults there are its own already
        outside = [f for f in faults if covered is None or not covered[0] <= f.at <= covered[1]]
        pending = faults
        if outside:
            window = timedelta(seconds=self.p.fleet_window_s)
            counted = fleet_faults(self.s, family, [(min(f.at for f in outside) - window,
                                                     max(f.at for f in outside) + window)])
            burst = fleet_burst_around(family, counted, [f.at for f in outside], self.p)
            if burst is not None:
                change = fleet_change(current, nodes, cluster=self.cluster, family=family, burst=burst, policy=self.p)
            if burst is not None and change is not None:
                state = change.incident
                nodes = sorted(set(burst.nodes) | (set(nodes) if change.kind == "updated" else set()))
                covered = covered if change.kind == "updated" else None
                pending = [*faults, *counted]
        if state is not None and state.status == "open":
            change, nodes = self._absorb(family, state, nodes, change, pending, covered)
        if change is not None:
            self._write(family, row, nodes, change)
        elif row is not None and current is not None and current.status == "open" and len(outside) < len(faults):
            row.updated_at = self.now  # a fault of its family within its reach: the burst goes on

    def _absorb(self, family: str, state: IncidentState, nodes: list[str], change: IncidentChange | None,
                pending: list[FleetFault], covered: _Span | None) -> tuple[IncidentChange | None, list[str]]:
        """The open incident `state` (spanning `nodes`) takes the faults within its reach: `pending`
        ones, and stored ones outside the reach already `covered`, as long as its span grows."""
        while True:
            lo, hi = fleet_reach(state, self.p)
            spans = [(lo, hi)] if covered is None else [s for s in ((lo, covered[0]), (covered[1], hi)) if s[0] < s[1]]
            found = [*pending, *fleet_faults(self.s, family, spans)]
            covered, pending = (lo, hi), []
            absorbed = fleet_absorbed(state, nodes, found, self.p)
            step = None if absorbed is None else fleet_change(state, nodes, cluster=self.cluster, family=family,
                                                              burst=absorbed, policy=self.p)
            if absorbed is None or step is None:
                return change, nodes
            nodes = sorted(set(nodes) | set(absorbed.nodes))
            state = step.incident
            if change is None or change.kind == "updated":
                change = IncidentChange("updated", state, step.reason if change is None else change.reason)
            else:
                change = IncidentChange(change.kind, state, change.reason, resolved_previous=change.resolved_previous)

    def _write(self, family: str, row: Incident | None, nodes: list[str], change: IncidentChange) -> None:
        """Write the fleet incident's change (`models.fleet.fleet_change`) and its messages."""
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
            row.nodes, row.count, row.codes, row.reason = nodes, len(nodes), list(inc.codes), inc.reason
            row.first_seen, row.last_seen, row.updated_at = inc.first_seen, inc.last_seen, self.now
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
        self.outbox.extend(action_message(a, row) for a in action_requests(change, version=row.version))


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
        out.extend(action_message(a, row) for a in action_requests(change, version=row.version))
    return out


def _xid(code: str) -> int | None:
    """The Xid of a stored code (`models.vocabulary.stored_code`), for the history's Xid filter."""
    value = stored_code(code)
    return value.number if value is not None and value.kind is CodeKind.XID else None
