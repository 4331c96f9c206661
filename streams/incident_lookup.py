"""The incident rows the grouping engine reads (`models.grouping.IncidentLookup`), from SQL.

Per transaction: the latest incident of a fingerprint (rows the transaction changed first, then the
database: one query for a batch's reports, `prefetch`, then one per miss, misses remembered), and
the occurrences of a node's open GPU incidents near a node-level report in event time (the counted
fault events of the database and those this transaction grouped, `note_occurrence`). Each row is
handed to the engine as its state grouped so far in the transaction (`states`), and found again by
its incident id.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import incident_state
from history.tables import FaultEvent, Incident
from models.grouping import Occurrence, Report, reads
from models.identity import signal
from models.incidents import IncidentState


class RowLookup:
    """Per transaction: the incident rows the engine asks for, with the transaction's incidents so far."""

    def __init__(self, s: Session, incidents: dict[str, Incident], states: dict[str, IncidentState]) -> None:
        self.s = s
        self.incidents = incidents  # by fingerprint: the latest row (the transaction's view)
        self.states = states  # by incident id: the state grouped so far in this transaction
        self._rows: dict[str, Incident] = {}  # by incident id: the rows whose state the engine was given
        # Fingerprints with no incident in the database when the transaction began (`prefetch`); a row
        # the transaction adds is found in `incidents` first.
        self._absent: set[str] = set()
        # Per node: (time, incident id, signal) of the reports this transaction counted in GPU incidents.
        self._counted: dict[str, list[tuple[datetime, str, str]]] = defaultdict(list)

    def latest(self, fingerprint: str) -> IncidentState | None:
        row = self.latest_row(fingerprint)
        return self.state(row) if row is not None else None

    def note_occurrence(self, node: str, at: datetime, incident_id: str, sig: str) -> None:
        """A report this transaction counted as a new occurrence of a GPU incident (not in SQL yet)."""
        self._counted[node].append((at, incident_id, sig))

    def gpu_occurrences(self, node: str, at: datetime, window_s: float) -> list[Occurrence]:
        w = timedelta(seconds=window_s)
        found: dict[tuple[str, datetime], str] = {}
        with self.s.no_autoflush:
            for occurred_at, family, sources, code, incident_id in self.s.execute(
                sa.select(FaultEvent.occurred_at, FaultEvent.family, FaultEvent.sources, FaultEvent.code,
                          FaultEvent.incident_id)
                .join(Incident, Incident.incident_id == FaultEvent.incident_id)
                .where(FaultEvent.node == node, FaultEvent.occurred_at >= at - w, FaultEvent.occurred_at <= at + w,
                       FaultEvent.counted.is_not(False), Incident.component == "gpu", Incident.status == "open")
            ):
                source = "kernel" if "kernel" in (sources or "kernel") else str(sources)
                found[(str(incident_id), occurred_at)] = signal(family, source, code)
        for t, incident_id, sig in self._counted.get(node, ()):
            if abs((t - at).total_seconds()) <= window_s:
                found[(incident_id, t)] = sig
        out: list[Occurrence] = []
        for (incident_id, t), sig in found.items():
            row = self._rows.get(incident_id) or self.s.get(Incident, incident_id)
            if row is None or row.component != "gpu":
                continue
            st = self.state(row)
            if st.status != "open":
                continue
            latest = t == st.occurrence_at
            out.append(Occurrence(st, t, tuple(st.occurrence_signals) if latest else (sig,)))
        return out

    def state(self, row: Incident) -> IncidentState:
        """The row as grouped so far in this transaction."""
        self._rows[row.incident_id] = row
        return self.states.get(row.incident_id) or incident_state(row)

    def row(self, incident_id: str) -> Incident:
        """The row of a state this lookup handed out."""
        return self._rows[incident_id]

    def prefetch(self, reports: Iterable[Report]) -> None:
        """Load, in one query, the latest incident of every fingerprint the engine may ask for about
        the reports (`models.grouping.reads`): `latest` then asks nothing."""
        wanted: set[str] = set()
        for r in reports:
            wanted |= reads(r)
        wanted -= self.incidents.keys() | self._absent
        if not wanted:
            return
        newest = sa.func.row_number().over(partition_by=Incident.fingerprint,
                                           order_by=(Incident.opened_at.desc(), Incident.incident_id.desc()))
        ranked = (sa.select(Incident.incident_id, newest.label("rank"))
                  .where(Incident.fingerprint.in_(sorted(wanted))).subquery())
        with self.s.no_autoflush:
            for row in self.s.scalars(sa.select(Incident).join(ranked, ranked.c.incident_id == Incident.incident_id)
                                      .where(ranked.c.rank == 1)):
                self.incidents.setdefault(row.fingerprint, row)
        self._absent |= wanted - self.incidents.keys()

    def latest_row(self, fingerprint: str) -> Incident | None:
        """The latest incident row of a fingerprint (open or resolved)."""
        row = self.incidents.get(fingerprint)
        if row is not None or fingerprint in self._absent:
            return row
        with self.s.no_autoflush:
            row = self.s.scalars(sa.select(Incident).where(Incident.fingerprint == fingerprint)
                                 .order_by(Incident.opened_at.desc(), Incident.incident_id.desc()).limit(1)).first()
        if row is not None:
            self.incidents[fingerprint] = row
        return row

