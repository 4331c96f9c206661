"""Grouping, classification in context, actions and fleet bursts as pure functions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from models.incidents import (
    ClassifyContext,
    IncidentState,
    actions_for,
    apply_fault,
    classify_in_context,
    fleet_burst,
    observation_from_kernel,
    observation_from_nvml,
    resolve_if_quiet,
    same_fault,
)
from models.kernlog.parser import KernelLogParser
from models.stream_policy import PipelinePolicy
from tests.streams.records import T0, Kmsg, nvml_xid, s

P = PipelinePolicy(quiet_period_s=600)


def test_storm_is_one_incident() -> None:
    current = None
    for i in range(1000):
        change = apply_fault(current, node="n", gpu="GPU-1", family="memory", code="Xid 48",
                             at=T0 + s(i * 0.01), policy=P)
        assert change.kind == ("opened" if i == 0 else "updated")
        current = change.incident
    assert current is not None
    assert current.count == 1000 and current.status == "open"
    assert current.first_seen == T0 and current.codes == ("Xid 48",)


def test_quiet_period_resolves_and_recurrence_reopens_with_link() -> None:
    first = apply_fault(None, node="n", gpu="G", family="memory", code="Xid 48", at=T0, policy=P).incident
    again = apply_fault(first, node="n", gpu="G", family="memory", code="Xid 63", at=T0 + s(599), policy=P)
    assert again.kind == "updated" and again.incident.codes == ("Xid 48", "Xid 63")
    later = apply_fault(again.incident, node="n", gpu="G", family="memory", code="Xid 48", at=T0 + s(1300), policy=P)
    assert later.kind == "reopened"
    assert later.resolved_previous is not None and later.resolved_previous.status == "resolved"
    assert later.incident.previous_incident_id == first.incident_id
    assert later.incident.incident_id != first.incident_id
    assert later.incident.fingerprint == first.fingerprint and later.incident.count == 1


def test_resolved_incident_recurrence_reopens() -> None:
    first = apply_fault(None, node="n", gpu="G", family="gpu_lost", code="Xid 79", at=T0, policy=P).incident
    resolved = resolve_if_quiet(first, last_activity=T0, now=T0 + s(601), policy=P)
    assert resolved is not None and resolved.kind == "resolved" and resolved.incident.status == "resolved"
    assert resolve_if_quiet(first, last_activity=T0, now=T0 + s(599), policy=P) is None
    again = apply_fault(resolved.incident, node="n", gpu="G", family="gpu_lost", code="Xid 79", at=T0 + s(700),
                        policy=P)
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


def incident(**kw: object) -> IncidentState:
    base = IncidentState(incident_id="v1:x@1", fingerprint="v1:x", node="n", gpu="G", family="memory", status="open",
                         count=1, first_seen=T0, last_seen=T0, category="hardware")
    return replace(base, **kw)  # type: ignore[arg-type]


ACTIONS = [
    ("open: ticket and notification", "opened", incident(family="driver", category="driver"), [],
     {("ticket", "create"), ("notification", "opened")}),
    ("gpu lost: cordon at once", "opened", incident(family="gpu_lost"), [79],
     {("ticket", "create"), ("notification", "opened"), ("cordon_candidate", "cordon")}),
    ("uncontained ECC Xid: cordon at once", "updated", incident(count=1), [95], {("cordon_candidate", "cordon")}),
    ("hardware repeats reach the threshold", "updated", incident(count=3), [], {("cordon_candidate", "cordon")}),
    ("below the threshold: nothing", "updated", incident(count=2), [], set()),
    ("never cordon an application fault", "updated", incident(family="application", category="application",
                                                               count=50), [13], set()),
    ("cordon requested once", "updated", incident(count=9, cordon_requested=True), [], set()),
    ("reopen makes a reopen ticket", "reopened", incident(family="driver", category="driver"), [],
     {("ticket", "reopen"), ("notification", "reopened")}),
    ("resolved notifies", "resolved", incident(status="resolved"), [], {("notification", "resolved")}),
    ("suspected hardware is reclassified and cordoned at the threshold", "reclassified",
     incident(family="application", category="suspected_hardware", count=3), [13],
     {("notification", "reclassified"), ("ticket", "comment:suspected_hardware"), ("cordon_candidate", "cordon")}),
]


@pytest.mark.parametrize(("kind", "inc", "xids", "want"), [a[1:] for a in ACTIONS], ids=[a[0] for a in ACTIONS])
def test_actions(kind: str, inc: IncidentState, xids: list[int], want: set[tuple[str, str]]) -> None:
    from models.incidents import IncidentChange

    got = actions_for(IncidentChange(kind, inc, "why"), xids, PipelinePolicy())  # type: ignore[arg-type]
    assert {(a.kind, a.operation) for a in got} == want
    assert len({a.idempotency_key for a in got}) == len(got)


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
