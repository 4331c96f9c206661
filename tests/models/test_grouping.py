"""The grouping engine (`models.grouping`): which incident a report joins, how it is counted and
classified, as pure functions; the observations it groups and fleet bursts (`models.incidents`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import pytest

from models.grouping import (
    AppFault,
    ClassifyContext,
    Grouper,
    Occurrence,
    Report,
    apply_fault,
    classify_in_context,
    in_grouping_order,
    kept_workloads,
    recount_events,
    same_fault,
)
from models.identity import Component, signal
from models.incidents import (
    IncidentChange,
    IncidentState,
    fleet_burst,
    observation_from_kernel,
    resolve_if_quiet,
)
from models.kernlog.parser import KernelLogParser
from models.signals.nvml.mapping import observation_from_nvml
from models.stream_policy import PipelinePolicy
from tests.streams.records import T0, Kmsg, nvml_xid, s

P = PipelinePolicy(quiet_period_s=600)


def fault(current: IncidentState | None, code: str, at: datetime, family: str = "memory", gpu: str = "G",
          source: str = "kernel") -> IncidentChange:
    return apply_fault(current, component=Component("gpu", "n", gpu), node="n", family=family, code=code,
                       signal=signal(family, source, code), at=at, policy=P)


def test_storm_is_one_incident() -> None:
    current = None
    for i in range(1000):
        change = fault(current, "Xid 48", T0 + s(i * 0.01), "memory", "GPU-1")
        assert change.kind == ("opened" if i == 0 else "updated")
        current = change.incident
    assert current is not None
    assert current.count == 1000 and current.status == "open"
    assert current.first_seen == T0 and current.codes == ("Xid 48",)


def test_quiet_period_resolves_and_recurrence_reopens_with_link() -> None:
    first = fault(None, "Xid 48", T0, "memory", "G").incident
    again = fault(first, "Xid 63", T0 + s(599), "memory", "G")
    assert again.kind == "updated" and again.incident.codes == ("Xid 48", "Xid 63")
    later = fault(again.incident, "Xid 48", T0 + s(1300), "memory", "G")
    assert later.kind == "reopened"
    assert later.resolved_previous is not None and later.resolved_previous.status == "resolved"
    assert later.incident.previous_incident_id == first.incident_id
    assert later.incident.incident_id != first.incident_id
    assert later.incident.fingerprint == first.fingerprint and later.incident.count == 1


def test_resolved_incident_recurrence_reopens() -> None:
    first = fault(None, "Xid 79", T0, "gpu_lost", "G").incident
    resolved = resolve_if_quiet(first, last_activity=T0, now=T0 + s(601), policy=P)
    assert resolved is not None and resolved.kind == "resolved" and resolved.incident.status == "resolved"
    assert resolve_if_quiet(first, last_activity=T0, now=T0 + s(599), policy=P) is None
    again = fault(resolved.incident, "Xid 79", T0 + s(700), "gpu_lost", "G")
    assert again.kind == "reopened" and again.incident.previous_incident_id == first.incident_id


def ctx(count: int, workloads: list[str], spread: dict[str, int], clean: dict[str, int] | None = None,
        family: str = "application") -> ClassifyContext:
    return ClassifyContext(gpu="GPU-1", family=family, codes=["Xid 13"], categories=["application"], count=count,
                           workloads=workloads, workload_fault_gpus=spread, workload_clean_gpus=clean or {})


CLASSIFY = [
    ("one crash is an application error", ctx(2, ["ml/a/c"], {"ml/a/c": 1}), "application", "below the repeat"),
    ("different workloads, only here, clean elsewhere: suspected hardware",
     ctx(4, ["ml/a/c", "ml/b/c", "ml/d/c"], {"ml/a/c": 1, "ml/b/c": 1, "ml/d/c": 1}, {"ml/a/c": 3, "ml/b/c": 2}),
     "suspected_hardware", "ran clean on other GPUs"),
    ("one workload following across GPUs: application",
     ctx(5, ["ml/a/c"], {"ml/a/c": 4}), "application", "follows the workload"),
    ("repeats of one workload on one GPU: still application", ctx(6, ["ml/a/c"], {"ml/a/c": 1}), "application", ""),
    ("hardware family keeps the catalog category", ctx(1, [], {}, family="memory"), "hardware", "memory error"),
    ("interconnect family", ctx(2, [], {}, family="nvlink"), "interconnect", ""),
]


@pytest.mark.parametrize(("context", "category", "reason_has"), [c[1:] for c in CLASSIFY],
                         ids=[c[0] for c in CLASSIFY])
def test_classify_in_context(context: ClassifyContext, category: str, reason_has: str) -> None:
    v = classify_in_context(context, PipelinePolicy())
    assert v.category == category
    assert reason_has in v.reason


def test_policy_thresholds_change_the_verdict() -> None:
    c = ctx(3, ["ml/a/c", "ml/b/c"], {"ml/a/c": 1, "ml/b/c": 1})
    assert classify_in_context(c, PipelinePolicy()).category == "suspected_hardware"
    assert classify_in_context(c, PipelinePolicy(repeat_threshold=5)).category == "application"
    assert classify_in_context(c, PipelinePolicy(min_distinct_workloads=3)).category == "application"


def test_kernel_and_nvml_xid_are_one_fault_within_the_window() -> None:
    assert same_fault("kernel", "G", 48, T0, "nvml", "G", 48, T0 + s(1), 5)
    assert not same_fault("kernel", "G", 48, T0, "nvml", "G", 48, T0 + s(6), 5)
    assert not same_fault("kernel", "G", 48, T0, "kernel", "G", 48, T0, 5)
    assert not same_fault("kernel", "G", 48, T0, "nvml", "H", 48, T0, 5)
    assert not same_fault("kernel", "G", 48, T0, "nvml", "G", 63, T0, 5)
    assert not same_fault("kernel", None, 48, T0, "nvml", None, 48, T0, 5)


def test_observations_carry_the_catalog_recommendation() -> None:
    line = Kmsg("n").xid(0, 48, T0, text="An uncorrectable double bit error (DBE) has been detected on GPU")
    rec = KernelLogParser().feed(line.message)[0]
    k = observation_from_kernel(rec, line)
    assert (k.family, k.xid, k.occurred_at, k.pci) == ("memory", 48, T0, "0000:18:00.0")
    assert k.immediate_action and k.description and k.raw == line.message
    n = observation_from_nvml(nvml_xid("n", 0, 48, T0, 1))
    assert n is not None and n.family == "memory" and n.immediate_action == k.immediate_action
    assert n.content_hash != k.content_hash


def test_fleet_burst() -> None:
    p = PipelinePolicy(fleet_min_nodes=3)
    assert fleet_burst("gpu_lost", ["a", "b"], p) is None
    assert fleet_burst("gpu_lost", ["a", "b", "b"], p) is None
    reason = fleet_burst("gpu_lost", ["a", "b", "c"], p)
    assert reason is not None and "3 nodes" in reason
    assert fleet_burst("application", ["a", "b", "c", "d"], p) is None


def test_every_sensor_view_of_one_fault_counts_once() -> None:
    aer = fault(None, "AER", T0, "pcie")
    xid = fault(aer.incident, "Xid 79", T0 + s(1), "gpu_lost")
    nvml = fault(xid.incident, "Xid 79", T0 + s(1.5), "gpu_lost", source="nvml")
    bus = fault(nvml.incident, "fallen off the bus", T0 + s(2), "gpu_lost")
    assert [c.counted for c in (aer, xid, nvml, bus)] == [True, False, False, False]
    assert bus.incident.count == 1 and bus.incident.family == "gpu_lost"
    assert bus.incident.codes == ("AER", "Xid 79", "fallen off the bus")
    # A lost GPU cannot be lost again until it is back: the driver's second "fallen off the bus" is the
    # same fault; a report after the window is the next one.
    again = fault(bus.incident, "fallen off the bus", T0 + s(3), "gpu_lost")
    late = fault(again.incident, "AER", T0 + s(P.occurrence_window_s + 1), "pcie")
    assert (again.counted, again.incident.count) == (False, 1)
    assert (late.counted, late.incident.count) == (True, 2)


def test_the_same_report_again_is_the_next_fault_unless_another_sensor_copied_it() -> None:
    first = fault(None, "Xid 74", T0, "nvlink")
    nvml = fault(first.incident, "Xid 74", T0 + s(1), "nvlink", source="nvml")
    second = fault(nvml.incident, "Xid 74", T0 + s(1.5), "nvlink")
    late_copy = fault(second.incident, "Xid 74", T0 + s(1.5 + P.duplicate_window_s + 1), "nvlink", source="nvml")
    assert [c.counted for c in (first, nvml, second, late_copy)] == [True, False, True, True]
    assert late_copy.incident.count == 3


def test_gsp_failure_its_recovery_action_and_an_unrelated_memory_error() -> None:
    gsp = fault(None, "Xid 119", T0, "gsp")
    action = fault(gsp.incident, "Xid 154", T0 + s(40), "recovery_action")
    ecc = fault(action.incident, "Xid 48", T0 + s(41), "memory")
    assert (action.counted, ecc.counted) == (False, True)
    assert ecc.incident.count == 2 and ecc.incident.family == "gsp"


# --- where a report goes (`Grouper.place`), on a table of incident states ------------------------


class Table:
    """Incident states as a lookup (`models.grouping.IncidentLookup`): the latest per fingerprint, and
    each one's latest occurrence and the `earlier` ones given."""

    def __init__(self, *states: IncidentState, earlier: tuple[Occurrence, ...] = ()) -> None:
        self.states = list(states)
        self.earlier = earlier

    def latest(self, fingerprint: str) -> IncidentState | None:
        return next((st for st in reversed(self.states) if st.fingerprint == fingerprint), None)

    def gpu_occurrences(self, node: str, at: datetime, window_s: float) -> list[Occurrence]:
        found = [Occurrence(st, st.occurrence_at, st.occurrence_signals) for st in self.states
                 if st.node == node and st.component == "gpu" and st.occurrence_at is not None]
        return [o for o in (*found, *self.earlier) if abs((o.at - at).total_seconds()) <= window_s]


def gpu_incident(gpu: str, group: str, at: datetime, **kw: object) -> IncidentState:
    comp = Component("gpu", "n", gpu)
    base = IncidentState(incident_id=f"{comp.fingerprint}@{gpu}", fingerprint=comp.fingerprint, node="n", gpu=gpu,
                         family=group, status="open", count=1, first_seen=at, last_seen=at, component="gpu",
                         component_id=gpu, occurrence_at=at, occurrence_signals=(f"{group}/kernel:x",))
    return replace(base, **kw)  # type: ignore[arg-type]


def report(family: str, at: datetime, *, kind: str = "xid", code: str = "Xid 48", pci: str | None = None,
           gpu_uuid: str | None = None, workload: str | None = None, error: object = None) -> Report:
    return Report("n", "kernel", kind, family, code, at, pci, gpu_uuid, workload, error,
                  names_gpu=pci is not None or gpu_uuid is not None)


def test_a_node_level_report_joins_the_closest_gpu_fault_of_its_group_within_the_window() -> None:
    lost_a = gpu_incident("GPU-a", "gpu_lost", T0)
    lost_b = gpu_incident("GPU-b", "gpu_lost", T0 + s(50))
    memory = gpu_incident("GPU-c", "memory", T0 + s(61))
    grouper = Grouper(Table(lost_a, lost_b, memory), P)
    gpu_lost_line = report("gpu_lost", T0 + s(60), kind="driver_error", code="driver_error", error="gpu_lost")
    placed = grouper.place(gpu_lost_line)
    assert placed.component == Component("gpu", "n", "GPU-b") and placed.current == lost_b and placed.group is None
    # A crash dump follows whatever fatal fault it comes with: the closest of any group, whose group it takes.
    dump = report("driver", T0 + s(60), kind="driver_error", code="driver_error", error="crash_dump")
    assert grouper.place(dump).component.id == "GPU-c" and grouper.place(dump).group == "memory"
    # Past the occurrence window it is the node's own.
    late = Grouper(Table(lost_a), P).place(replace(gpu_lost_line, at=T0 + s(P.occurrence_window_s + 1)))
    assert late.component == Component("node", "n", "driver") and late.current is None


def test_a_gpu_first_known_by_its_pci_address_keeps_its_incident_once_its_uuid_is_known() -> None:
    by_pci = gpu_incident("0000:3b:00.0", "memory", T0)
    placed = Grouper(Table(by_pci), P).place(report("memory", T0 + s(9), pci="0000:3b:00.0", gpu_uuid="GPU-1"))
    assert placed.component == Component("gpu", "n", "GPU-1") and placed.current == by_pci
    # Unless that incident is another card's (the GPU at that address was swapped).
    swapped = replace(by_pci, gpu_uuid="GPU-0")
    placed = Grouper(Table(swapped), P).place(report("memory", T0 + s(9), pci="0000:3b:00.0", gpu_uuid="GPU-1"))
    assert placed.current is None


def test_a_node_level_report_joins_the_occurrence_it_came_with_not_the_incident_s_latest() -> None:
    """One batch may hold hours of a node: the GPU incident's latest fault (a contained ECC error two
    hours after the GPU fell off the bus) is not the one the bus-loss line came with."""
    lost_at, later = T0, T0 + s(7200)
    gpu = gpu_incident("GPU-a", "gpu_lost", lost_at)
    gpu = replace(gpu, family="gpu_lost", count=2, last_seen=later, occurrence_at=later,
                  occurrence_signals=("memory/kernel:Xid 94",))
    lost = Occurrence(gpu, lost_at, ("gpu_lost/kernel:Xid 79",))
    line = report("gpu_lost", lost_at + s(0.5), kind="driver_error", code="driver_error", error="gpu_lost")
    grouper = Grouper(Table(gpu, earlier=(lost,)), P)
    placed, change = grouper.group(line)
    assert placed.component == Component("gpu", "n", "GPU-a") and placed.occurrence == lost
    assert not change.counted and change.incident.count == 2
    assert change.incident.occurrence_at == later, "the latest occurrence stays the latest"
    # Without the occurrence it came with, the line is the node's own.
    assert Grouper(Table(gpu), P).place(line).component == Component("node", "n", "driver")


def app(workload: str, hours: float, gpu: str = "G", counted: bool = True) -> AppFault:
    return AppFault("n", gpu, workload, T0 + s(3600 * hours), counted)


def test_a_gpu_keeps_the_faults_of_different_workloads_that_faulted_nowhere_else_within_the_window() -> None:
    window = PipelinePolicy(classify_window_s=24 * 3600)
    here = [app("a", 0), app("b", 10), app("c", 20)]
    assert kept_workloads(here, {}, T0 + s(20 * 3600), window) == ["a", "b", "c"]
    # Not yet at the second fault (two of the three), nor past the window (the first is too old).
    assert kept_workloads(here, {}, T0 + s(10 * 3600), window) == []
    assert kept_workloads([*here, app("d", 30)], {}, T0 + s(30 * 3600), window) == ["b", "c", "d"]
    # A workload that faulted on another GPU within the window is its own (and counts as a repeat here)...
    assert kept_workloads(here, {"b": [T0 + s(9 * 3600)]}, T0 + s(20 * 3600), window) == ["a", "c"]
    # ... and one workload alone is no pattern of the GPU's.
    assert kept_workloads(here, {"b": [T0 + s(9 * 3600)], "c": [T0]}, T0 + s(20 * 3600), window) == []
    # Only the window decides: faults read later, after it, change nothing.
    assert kept_workloads([*here, app("b", 21)], {"c": [T0 + s(22 * 3600)]}, T0 + s(20 * 3600),
                          window) == ["a", "b", "c"]
    # A second report of one crash (not counted) is no repeat.
    assert kept_workloads([app("a", 0), app("b", 10), app("b", 10.0001, counted=False)], {},
                          T0 + s(11 * 3600), window) == []
    # A 48 h window keeps three jobs failed over 36 h.
    spread = [app("a", 0), app("b", 18), app("c", 36)]
    assert kept_workloads(spread, {}, T0 + s(36 * 3600), window) == []
    assert kept_workloads(spread, {}, T0 + s(36 * 3600), PipelinePolicy(classify_window_s=48 * 3600)) == [
        "a", "b", "c"]


def test_reports_are_grouped_in_event_time_moment_by_moment_gpu_naming_first() -> None:
    dump = report("driver", T0, kind="driver_error", code="driver_error", error="crash_dump")
    xid119 = report("gsp", T0, code="Xid 119", pci="0000:4e:00.0")
    xid154 = report("recovery_action", T0 + s(1), code="Xid 154", pci="0000:4e:00.0")
    w = P.occurrence_window_s
    assert in_grouping_order([dump, xid119, xid154], lambda r: r, w) == [xid119, xid154, dump]
    # Hours of one node in one batch: each moment in turn, not every GPU report of the batch first.
    later = report("memory", T0 + s(7200), code="Xid 94", pci="0000:4e:00.0")
    assert in_grouping_order([xid119, dump, later], lambda r: r, w) == [xid119, dump, later]
    # Nodes interleave by time; each keeps its own order.
    other = replace(report("memory", T0 + s(3600), code="Xid 48", pci="0000:18:00.0"), node="m")
    assert in_grouping_order([xid119, dump, later, other], lambda r: r, w) == [xid119, dump, other, later]


@dataclass
class Event:
    occurred_at: datetime
    code: str
    family: str = "application"
    sources: str | None = "kernel"
    counted: bool | None = True


def test_an_application_incident_is_counted_again_in_time_order_and_any_other_keeps_its_marks() -> None:
    # One crash on two GPUs of a job (Xid 13 then 43 on each), then a later one: two occurrences.
    crash = [Event(T0, "Xid 13"), Event(T0 + s(0.1), "Xid 43"), Event(T0 + s(1), "Xid 13", counted=True),
             Event(T0 + s(1.1), "Xid 43"), Event(T0 + s(600), "Xid 31")]
    counts = recount_events(crash, P)
    assert counts.counted == (True, False, True, False, True) and counts.count == 3
    assert counts.occurrence == (T0 + s(600), ("application/kernel:Xid 31",))
    mixed = [Event(T0, "Xid 13", counted=True), Event(T0 + s(1), "Xid 48", "memory", counted=False)]
    assert recount_events(mixed, P).counted == (True, False) and recount_events(mixed, P).occurrence is None
