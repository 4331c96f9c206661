"""The fleet view: the same fault family on `fleet_min_nodes` nodes within `fleet_window_s` is one
fleet incident per (cluster, family) and burst: an incident row of component `fleet` (`models.fleet`),
opened, updated and resolved like any other, with its ticket and its infrastructure message."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.fleet_incidents import fleet_faults, fleet_incidents_from, lock_fleet_counts, new_fleet_row
from history.incident_index import IncidentIndex
from history.incident_rows import incident_state
from history.tables import Incident, OutboxMessage
from models.actions import action_requests
from models.fleet import (
    BREAKER,
    FLEET,
    FleetBurst,
    FleetFault,
    fleet_absorbed,
    fleet_bursts_around,
    fleet_change,
    fleet_fingerprint,
    fleet_joined,
    fleet_quiet,
    fleet_reach,
    fleet_target,
    past_fleet_incident,
)
from models.incidents import IncidentChange, IncidentState
from models.stream_policy import PipelinePolicy
from models.vocabulary import CodeKind, stored_code
from streams.outbox import action_message, incident_message

log = logging.getLogger(__name__)

_Span = tuple[datetime, datetime]


@dataclass(slots=True)
class _Incident:
    """One fleet incident of a family as this count sees it: its row (None: new), its state and nodes,
    and what the count did to it."""

    row: Incident | None
    state: IncidentState
    nodes: list[str]
    change: IncidentChange | None = None  # opened, reopened or updated by this count
    resolved: tuple[datetime, str] | None = None  # resolved by this count: when, why
    # Its reach as stored (None: new). Every count that stored a fault within an incident's reach made
    # the incident take it, so the stored faults there are its own already but for this batch's.
    stored_reach: _Span | None = None

    def take(self, change: IncidentChange, nodes: Sequence[str]) -> None:
        self.state, self.nodes = change.incident, sorted(set(self.nodes) | set(nodes))
        if self.change is None or change.kind != "updated":
            self.change = change
        else:
            self.change = IncidentChange(self.change.kind, change.incident, self.change.reason)


class FleetBursts:
    """The fleet families' faults one transaction stored, counted in event time at its end.

    Per family, under `lock_fleet_counts`: the family's faults in the database around the batch's are
    counted into bursts (`models.fleet.fleet_bursts_around`), and each burst goes where it belongs in
    event time (`models.fleet.fleet_target`): into the incident whose reach it overlaps, open or
    resolved; after the latest (a new incident, resolving the latest when it is open); or, read after
    a later burst, before it (an incident over already). Then every incident the batch's faults reach
    takes the stored faults within its reach, again as long as its span grows. So an incident gets
    every node of its family within its reach, whichever batch read which fault, in whatever order."""

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
        """Count the batch's `faults` of `family` and write what they change of its fleet incidents."""
        window = timedelta(seconds=self.p.fleet_window_s)
        lo, hi = min(f.at for f in faults), max(f.at for f in faults)
        known = []
        for r in fleet_incidents_from(self.s, self.cluster, family, lo - 2 * window):
            state = incident_state(r)
            known.append(_Incident(r, state, [str(n) for n in r.nodes or []], stored_reach=fleet_reach(state, self.p)))
        if not _within_one(known, lo, hi, window):
            counted = fleet_faults(self.s, family, [(lo - window, hi + window)])
            for burst in fleet_bursts_around(family, counted, [f.at for f in faults], self.p):
                self._place(family, burst, known)
        for inc in known:
            reach = fleet_reach(inc.state, self.p)
            if inc.change is not None or any(reach[0] <= f.at <= reach[1] for f in faults):
                self._absorb(family, inc, faults)
        for inc in known:  # resolutions first, then the rest in event time
            if inc.resolved is not None and inc.row is not None:
                self._resolve(inc.row, *inc.resolved)
        for inc in sorted(known, key=lambda i: (i.state.first_seen, i.state.incident_id)):
            if inc.change is not None:
                self._write(family, inc)
            elif inc.row is not None and inc.row.status == "open":
                reach = fleet_reach(inc.state, self.p)
                if any(reach[0] <= f.at <= reach[1] for f in faults):
                    inc.row.updated_at = self.now  # a fault of its family within its reach: the burst goes on

    def _place(self, family: str, burst: FleetBurst, known: list[_Incident]) -> None:
        """Put one burst where it belongs among the family's incidents (`models.fleet.fleet_target`)."""
        where, target = fleet_target(burst, [i.state for i in known], self.p)
        inc = next((i for i in known if target is not None and i.state.incident_id == target.incident_id), None)
        if where == "join" and inc is not None:
            change = fleet_joined(inc.state, inc.nodes, family=family, burst=burst, policy=self.p)
            if change is not None:
                inc.take(change, burst.nodes)
            return
        if where == "before":
            change = past_fleet_incident(target, cluster=self.cluster, family=family, burst=burst, policy=self.p)
        else:
            change_ = fleet_change(target, inc.nodes if inc is not None else [], cluster=self.cluster, family=family,
                                   burst=burst, policy=self.p)
            if change_ is None:
                return
            change = change_
            if change.resolved_previous is not None and inc is not None:
                inc.state = change.resolved_previous
                inc.resolved = (change.resolved_previous.resolved_at or self.now, change.reason)
        fresh = _Incident(None, change.incident, [])
        fresh.take(change, burst.nodes)
        known.append(fresh)

    def _absorb(self, family: str, inc: _Incident, batch: Sequence[FleetFault]) -> None:
        """The incident takes the stored faults within its reach, as long as its span grows: this batch's
        (`batch`), and those read from SQL where its reach goes beyond its stored one (all of it, new)."""
        covered = inc.stored_reach
        extra = list(batch) if covered is not None else []
        while True:
            lo, hi = fleet_reach(inc.state, self.p)
            if covered is None:
                spans = [(lo, hi)]
            else:
                spans = [s for s in ((lo, covered[0]), (covered[1], hi)) if s[0] < s[1]]
                lo, hi = min(lo, covered[0]), max(hi, covered[1])
            covered = (lo, hi)
            found = fleet_faults(self.s, family, spans) + extra
            extra = []
            absorbed = fleet_absorbed(inc.state, inc.nodes, found, self.p)
            step = None if absorbed is None else fleet_joined(inc.state, inc.nodes, family=family, burst=absorbed,
                                                              policy=self.p)
            if absorbed is None or step is None:
                return
            inc.take(step, absorbed.nodes)

    def _write(self, family: str, inc: _Incident) -> None:
        """Write the fleet incident's change (`models.fleet`) and its messages."""
        change = inc.change
        assert change is not None
        st = replace(inc.state, status="open", resolved_at=None) if inc.row is None else inc.state
        row = inc.row
        if row is None:
            row = inc.row = new_fleet_row(st, inc.nodes, self.now, family)
            self.s.add(row)
            log.warning("fleet incident %s %s: %s", st.incident_id, change.kind, change.reason,
                        extra={"family": family, "incident": st.incident_id, "cluster": self.cluster})
        else:
            row.nodes, row.count, row.codes, row.reason = inc.nodes, len(inc.nodes), list(st.codes), st.reason
            row.first_seen, row.last_seen, row.updated_at = st.first_seen, st.last_seen, self.now
            row.version += 1
            log.info("fleet incident %s updated: %s", row.incident_id, change.reason,
                     extra={"family": family, "incident": row.incident_id, "cluster": self.cluster})
        for code in st.codes:
            self.index.add(row.incident_id, code, _xid(code), None)
        self._emit(row, change)
        if inc.resolved is not None and row.status == "open":  # a later burst of this count ended it
            self._resolve(row, *inc.resolved)
        elif inc.state.status == "resolved" and row.status == "open":  # read after a later burst: over already
            self._resolve(row, inc.state.resolved_at or self.now, change.reason)

    def _resolve(self, row: Incident, at: datetime, reason: str) -> None:
        row.status, row.resolved_at, row.updated_at = "resolved", at, self.now
        row.version += 1
        self.s.flush()  # the resolved row first: one open incident per fingerprint
        self._emit(row, IncidentChange("resolved", incident_state(row), reason))

    def _emit(self, row: Incident, change: IncidentChange) -> None:
        self.outbox.append(incident_message(row, change.kind, change.reason))
        self.outbox.extend(action_message(a, row) for a in action_requests(change, version=row.version))


def _within_one(known: Sequence[_Incident], lo: datetime, hi: datetime, window: timedelta) -> bool:
    """Whether the batch's faults of a family (event times `lo` to `hi`) all fall within the stored reach
    of one of its incidents that no other could share a burst with: then every burst around them would
    join that one (`models.fleet.fleet_target`), whose taking them and the stored faults within its
    reach (`FleetBursts._absorb`) is what the count would do, without reading two fleet windows of faults.
    A burst around them spans at most from `lo` less a window to `hi` plus one, so another incident
    ending two windows before `lo` or starting two windows after `hi` shares none."""
    holders = [i for i in known if i.stored_reach is not None and i.stored_reach[0] <= lo and hi <= i.stored_reach[1]]
    if len(holders) != 1:
        return False
    one = holders[0]
    return all(i is one or i.state.last_seen < lo - 2 * window or i.state.first_seen > hi + 2 * window for i in known)


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
