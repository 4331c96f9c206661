"""The incident rows the grouping engine reads (`models.grouping.IncidentLookup`), from SQL.

Per transaction: the latest incident of a fingerprint (rows the transaction changed first, then the
database: one query for a batch's reports, `prefetch`, then one per miss, misses remembered), and
the open GPU incidents of a node a node-level report may attach to. Each row is handed to the engine
as its state grouped so far in the transaction (`states`), and found again by its incident id.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import incident_state
from history.tables import Incident
from models.grouping import Report, reads
from models.incidents import IncidentState

_CANDIDATES = 8  # open GPU incidents of a node a node-level report is checked against


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

    def latest(self, fingerprint: str) -> IncidentState | None:
        row = self.latest_row(fingerprint)
        return self.state(row) if row is not None else None

    def open_gpu_incidents(self, node: str) -> list[IncidentState]:
        return [self.state(r) for r in self._open_gpu_rows(node)]

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

    def _open_gpu_rows(self, node: str) -> list[Incident]:
        here = {r.incident_id: r for r in self.incidents.values()
                if r.node == node and r.component == "gpu" and r.status == "open"}
        with self.s.no_autoflush:
            for r in self.s.scalars(sa.select(Incident).where(
                    Incident.node == node, Incident.component == "gpu", Incident.status == "open",
            ).order_by(Incident.last_seen.desc()).limit(_CANDIDATES)):
                here.setdefault(r.incident_id, r)
        return list(here.values())
