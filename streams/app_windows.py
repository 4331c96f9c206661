"""The application faults the keep rule reads during one transaction (`models.grouping.kept_workloads`).

At the start of a batch: the application faults of the database on the GPUs the batch's faults of
known workloads hit, and those of their workloads on any other GPU, within the classification
window before the batch's first fault up to its last (two queries), and every application fault of
the batch. As the batch is grouped in event time, each of its faults is marked with what grouping
made of it (counted, in a GPU's incident), and at each application fault of a workload the rule is
asked about its GPU over the window that ends there: the same question, over the same faults, as
a batch of that one fault would ask. The answer does not depend on how the faults were cut into
batches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import FaultEvent, Incident
from models.grouping import AppFault, kept_workloads, window_start
from models.stream_policy import PipelinePolicy

Pair = tuple[str, str]  # (node, GPU as fault events record it)


@dataclass(slots=True)
class WindowFault:
    """An application fault in the window: the batch's are marked as they are grouped."""

    node: str
    gpu: str
    workload: str | None
    at: datetime
    counted: bool = True
    in_gpu: bool = False  # in an incident of its GPU (kept there, or grouped there for want of a workload)


class AppWindows:
    """One transaction's view of the application faults around its own (see the module)."""

    def __init__(self, s: Session, policy: PipelinePolicy) -> None:
        self.s = s
        self.p = policy
        self.here: dict[Pair, list[WindowFault]] = defaultdict(list)  # per GPU: its application faults
        self.by_workload: dict[str, list[WindowFault]] = defaultdict(list)  # per workload: its application faults

    def load(self, batch: Iterable[tuple[str, str, str | None, datetime]]) -> dict[int, WindowFault]:
        """Read what the batch's application faults (node, GPU, workload, time) need; returns each batch
        fault's entry by its place in `batch`, to be marked as it is grouped (`grouped`)."""
        faults = list(batch)
        entries: dict[int, WindowFault] = {}
        pairs = {(node, gpu) for node, gpu, _, _ in faults if gpu != "node"}
        if not pairs:
            return entries
        self.load_stored(pairs, {w for *_, w, _ in faults if w}, min(at for *_, at in faults),
                         max(at for *_, at in faults))
        for i, (node, gpu, workload, at) in enumerate(faults):
            entries[i] = self._add(WindowFault(node, gpu, workload, at))
        return entries

    def load_stored(self, pairs: set[Pair], workloads: set[str], first: datetime, last: datetime) -> None:
        """Read the stored application faults on the GPUs `pairs` and of their workloads (and `workloads`)
        on any GPU, within the classification window before `first` up to `last`."""
        since, until = window_start(first, self.p), last
        seen: set[int] = set()
        with self.s.no_autoflush:
            rows = self.s.execute(
                sa.select(FaultEvent.id, FaultEvent.node, FaultEvent.gpu, FaultEvent.workload, FaultEvent.occurred_at,
                          FaultEvent.counted, Incident.component)
                .outerjoin(Incident, Incident.incident_id == FaultEvent.incident_id)
                .where(FaultEvent.family == "application", FaultEvent.occurred_at >= since,
                       FaultEvent.occurred_at <= until, sa.tuple_(FaultEvent.node, FaultEvent.gpu).in_(sorted(pairs)))
            ).all()
            for r in rows:
                seen.add(r.id)
                if r.workload:
                    workloads.add(r.workload)
                self._add(WindowFault(r.node, r.gpu, r.workload, r.occurred_at, r.counted is not False,
                                      r.component == "gpu"))
            if workloads:
                for event_id, node, gpu, workload, at in self.s.execute(
                    sa.select(FaultEvent.id, FaultEvent.node, FaultEvent.gpu, FaultEvent.workload,
                              FaultEvent.occurred_at)
                    .where(FaultEvent.family == "application", FaultEvent.workload.in_(sorted(workloads)),
                           FaultEvent.occurred_at >= since, FaultEvent.occurred_at <= until)
                ):
                    if event_id not in seen and workload:
                        self.by_workload[workload].append(WindowFault(node, gpu, workload, at))

    def _add(self, f: WindowFault) -> WindowFault:
        if f.gpu != "node":
            self.here[(f.node, f.gpu)].append(f)
        if f.workload:
            self.by_workload[f.workload].append(f)
        return f

    def kept(self, node: str, gpu: str, at: datetime) -> list[str]:
        """The workloads the GPU keeps at `at` when any of their faults within the window is not in its
        incident yet (those are to move); else none."""
        workloads, moving = self._keeping(node, gpu, at)
        return workloads if moving else []

    def keeps_only(self, fault: WindowFault) -> bool:
        """Whether the GPU keeps this fault of the batch, not grouped yet, at its own time, and no other
        fault is to move with it: it goes to the GPU's incident at once (as a move would put it)."""
        workloads, moving = self._keeping(fault.node, fault.gpu, fault.at)
        return fault.workload in workloads and moving == [fault]

    def _keeping(self, node: str, gpu: str, at: datetime) -> tuple[list[str], list[WindowFault]]:
        pair = (node, gpu)
        lo = window_start(at, self.p)
        inside = [f for f in self.here.get(pair, ()) if lo <= f.at <= at]
        # The rule asks whether a workload faulted on another GPU within the window: its first such
        # fault answers it (a job torn down on 200 GPUs is not read 200 times per fault).
        elsewhere: dict[str, list[datetime]] = {}
        for w in {f.workload for f in inside if f.workload}:
            other = next((f.at for f in self.by_workload[w] if (f.node, f.gpu) != pair and lo <= f.at <= at), None)
            elsewhere[w] = [] if other is None else [other]
        workloads = kept_workloads([AppFault(f.node, f.gpu, f.workload, f.at, f.counted) for f in inside],
                                   elsewhere, at, self.p)
        return workloads, [f for f in inside if f.workload in workloads and not f.in_gpu]

    def moved(self, node: str, gpu: str, at: datetime) -> None:
        """Faults on the GPU within the window ending at `at` moved to its incident, which counted them
        again (`streams.regroup.recount`): read what they are now."""
        lo = window_start(at, self.p)
        now: dict[tuple[datetime, str | None], tuple[bool, bool]] = {}
        with self.s.no_autoflush:
            for occurred_at, workload, counted, component in self.s.execute(
                sa.select(FaultEvent.occurred_at, FaultEvent.workload, FaultEvent.counted, Incident.component)
                .outerjoin(Incident, Incident.incident_id == FaultEvent.incident_id)
                .where(FaultEvent.node == node, FaultEvent.gpu == gpu, FaultEvent.family == "application",
                       FaultEvent.occurred_at >= lo, FaultEvent.occurred_at <= at)
            ):
                now[(occurred_at, workload)] = (counted is not False, component == "gpu")
        for f in self.here[(node, gpu)]:
            if (f.at, f.workload) in now:
                f.counted, f.in_gpu = now[(f.at, f.workload)]
