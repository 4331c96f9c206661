"""Which incident a fault report joins: its component (`models.identity`), found in SQL.

Three look-ups the pure identity function cannot make by itself:

- a GPU incident opened under the GPU's PCI address, before its UUID was known, is the same GPU's;
- a node-level report (no PCI address, no UUID: "GPU lost", a crash dump, an RPC history) is the
  companion of the GPU fault on that node whose occurrence it arrived with;
- an application fault on a GPU already found to keep faulting across workloads (a suspected
  hardware incident) is that GPU's, not its workload's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import incident_state
from history.tables import Incident
from models.correlate import Attribution
from models.identity import (
    Component,
    attaches_to_gpu_fault,
    companion_group,
    component_of,
    occurrence_group,
)
from models.incidents import FaultObservation, IncidentState
from models.pci import normalize_pci
from models.vocabulary import ComponentKind

_CANDIDATES = 8  # open GPU incidents of a node a node-level report is checked against


class ComponentResolver:
    """Per transaction: the component of each report, with the transaction's incidents so far."""

    def __init__(self, s: Session, incidents: dict[str, Incident], states: dict[str, IncidentState],
                 window_s: float) -> None:
        self.s = s
        self.incidents = incidents  # by fingerprint: the latest row (the transaction's view)
        self.states = states  # by incident id: the state grouped so far in this transaction
        self.window_s = window_s
        self._suspected: dict[tuple[str, str], Component | None] = {}
        # Fingerprints with no incident in the database when the transaction began (`prefetch`); a row
        # the transaction adds is found in `incidents` first.
        self._absent: set[str] = set()

    def component(self, obs: FaultObservation, attr: Attribution) -> tuple[Component, str | None]:
        """The report's component, and the companion group of the GPU fault a node-level report
        attaches to (None when it joins no other group's occurrence)."""
        pci = attr.gpu.pci or normalize_pci(obs.pci)
        workload = attr.workload if attr.pod.pod else None
        comp = component_of(node=obs.node, kind=obs.kind, family=obs.family, pci=pci, gpu_uuid=attr.gpu.uuid,
                            workload=workload)
        if comp.kind == "node":
            how = attaches_to_gpu_fault(obs.family, obs.details.get("error"))
            joined = self._companion_gpu(obs, any_group=how == "any") if how is not None else None
            if joined is not None:
                return joined
        if comp.kind == "workload":
            gpu = attr.gpu.uuid or pci
            if gpu:
                return self._suspected_gpu(obs.node, gpu, pci) or comp, None
        return comp, None

    def prefetch(self, reports: Iterable[tuple[FaultObservation, Attribution]]) -> None:
        """Load, in one query, the latest incident of every component the reports can join (their own,
        and for a GPU or a workload's GPU, the one by PCI address): `row_for` then asks nothing."""
        wanted: set[str] = set()
        for obs, attr in reports:
            pci = attr.gpu.pci or normalize_pci(obs.pci)
            workload = attr.workload if attr.pod.pod else None
            comp = component_of(node=obs.node, kind=obs.kind, family=obs.family, pci=pci, gpu_uuid=attr.gpu.uuid,
                                workload=workload)
            wanted.add(comp.fingerprint)
            gpu = comp.id if comp.kind == "gpu" else (attr.gpu.uuid or pci) if comp.kind == "workload" else None
            if gpu:
                wanted.add(Component(ComponentKind.GPU, obs.node, gpu).fingerprint)
            if gpu and pci and pci != gpu:
                wanted.add(Component(ComponentKind.GPU, obs.node, pci).fingerprint)
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

    def row_for(self, comp: Component, pci: str | None) -> Incident | None:
        """The latest incident of the component; for a GPU known by UUID, the incident opened under its
        PCI address (before the UUID was known) too: its reports join it, its recurrence links to it."""
        row = self._latest(comp.fingerprint)
        if row is None and comp.kind == "gpu" and pci and pci != comp.id:
            by_pci = self._latest(Component(ComponentKind.GPU, comp.node, pci).fingerprint)
            if by_pci is not None and by_pci.gpu_uuid in (None, comp.id):
                return by_pci
        return row

    def _latest(self, fingerprint: str) -> Incident | None:
        row = self.incidents.get(fingerprint)
        if row is not None or fingerprint in self._absent:
            return row
        with self.s.no_autoflush:
            row = self.s.scalars(sa.select(Incident).where(Incident.fingerprint == fingerprint)
                                 .order_by(Incident.opened_at.desc(), Incident.incident_id.desc()).limit(1)).first()
        if row is not None:
            self.incidents[fingerprint] = row
        return row

    def _state(self, row: Incident) -> IncidentState:
        return self.states.get(row.incident_id) or incident_state(row)

    def _companion_gpu(self, obs: FaultObservation, any_group: bool) -> tuple[Component, str | None] | None:
        """The open GPU incident of the node whose last occurrence this node-level report belongs to:
        one of the report's own companion group, or (`any_group`: a crash dump) the closest in time."""
        group = companion_group(obs.family)

        def fits(st: IncidentState) -> bool:
            return (st.status == "open" and st.component == "gpu" and st.occurrence_at is not None
                    and bool(st.occurrence_signals)
                    and (any_group or occurrence_group(st.occurrence_signals) == group)
                    and abs((obs.occurred_at - st.occurrence_at).total_seconds()) <= self.window_s)

        best = _best(obs, fits, self._open_gpu_rows(obs.node), self._state)
        if best is None:
            return None
        row = best
        joined_group = occurrence_group(self._state(row).occurrence_signals)
        return Component(ComponentKind.GPU, row.node, row.component_id or row.gpu), joined_group if any_group else None

    def _open_gpu_rows(self, node: str) -> list[Incident]:
        here = {r.incident_id: r for r in self.incidents.values()
                if r.node == node and r.component == "gpu" and r.status == "open"}
        with self.s.no_autoflush:
            for r in self.s.scalars(sa.select(Incident).where(
                    Incident.node == node, Incident.component == "gpu", Incident.status == "open",
            ).order_by(Incident.last_seen.desc()).limit(_CANDIDATES)):
                here.setdefault(r.incident_id, r)
        return list(here.values())

    def _suspected_gpu(self, node: str, gpu: str, pci: str | None) -> Component | None:
        """The GPU's component when it has an open suspected-hardware incident."""
        key = (node, gpu)
        if key not in self._suspected:
            comp = Component(ComponentKind.GPU, node, gpu)
            row = self.row_for(comp, pci)
            ok = row is not None and row.status == "open" and self._state(row).category == "suspected_hardware"
            self._suspected[key] = Component(ComponentKind.GPU, node, row.component_id or gpu) if ok and row else None
        return self._suspected[key]


def _best(obs: FaultObservation, fits: Callable[[IncidentState], bool], rows: list[Incident],
          state: Callable[[Incident], IncidentState]) -> Incident | None:
    """The fitting row whose occurrence is closest in time to the report."""
    best: tuple[float, Incident] | None = None
    for r in rows:
        st = state(r)
        if not fits(st) or st.occurrence_at is None:
            continue
        gap = abs((obs.occurred_at - st.occurrence_at).total_seconds())
        if best is None or gap < best[0]:
            best = (gap, r)
    return best[1] if best is not None else None
