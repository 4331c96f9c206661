"""The pure cordon and release decisions (`models.cordon`), table-driven."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from models.cordon import (
    ANN_CORDONED_AT,
    ANN_INCIDENT,
    ANN_OCCURRENCES,
    CONDITION_REASONS,
    TAINT_KEY,
    BreakerState,
    CordonRequest,
    FleetView,
    NodeView,
    Occurrence,
    PodRef,
    condition_reason,
    cordon_request_for,
    decide_cordon,
    decide_release,
    occurrences_in_window,
    pool_allowance,
    with_our_taint,
    without_our_taint,
)
from models.cordon_policy import Breaker, CordonPolicy, Match, Scope
from models.incidents import IncidentState
from models.vocabulary import Category, CodeKind, CordonOutcome, Family, FaultCode, ImmediateAction

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
XID = {  # family, category, NVIDIA immediate action (as the catalog and the stream give them)
    13: ("application", "application", "RESTART_APP"),
    31: ("application", "application", "RESTART_APP"),
    48: ("memory", "hardware", "WORKFLOW_XID_48"),
    63: ("memory", "hardware", "IGNORE"),
    64: ("memory", "hardware", "RESET_GPU"),
    74: ("nvlink", "interconnect", "WORKFLOW_NVLINK_ERR"),
    79: ("gpu_lost", "hardware", "RESTART_BM"),
    94: ("memory", "hardware", "RESTART_APP"),
    95: ("memory", "hardware", "RESET_GPU"),
    119: ("gsp", "hardware", "RESET_GPU"),
}


def req(xid: int, *, count: int = 1, span_s: float = 0, category: str | None = None, incident: str = "inc-1",
        **kw: Any) -> CordonRequest:
    family, cat, action = XID[xid]
    return CordonRequest(node="n1", incident_id=incident, family=family, xids=(xid,), category=category or cat,
                         immediate_actions=(action,), count=count, first_seen=T0 - timedelta(seconds=span_s),
                         last_seen=T0, **kw)


def node(**kw: Any) -> NodeView:
    return NodeView(name="n1", **kw)


OURS = {ANN_CORDONED_AT: T0.isoformat(), ANN_INCIDENT: "inc-1", ANN_OCCURRENCES: "1"}
POLICY = CordonPolicy()


@pytest.mark.parametrize(
    ("request_", "expected", "rule"),
    [
        (req(79), "cordon", "gpu-lost"),
        (req(95), "cordon", "uncontained-ecc"),
        (req(64), "cordon", "row-remap-failure"),
        (req(119), "cordon", "nvidia-reset-or-reboot"),
        (req(13), "not_needed", "application"),
        (req(13, count=50), "not_needed", "application"),
        (req(31, count=2, category="suspected_hardware"), "not_needed", "suspected-hardware"),
        (req(31, count=3, category="suspected_hardware"), "cordon", "suspected-hardware"),
        (req(74, count=2), "not_needed", "nvlink-repeats"),
        (req(74, count=3, span_s=3000), "cordon", "nvlink-repeats"),
        (req(74, count=3, span_s=3 * 3600), "not_needed", "nvlink-repeats"),  # about 1 per hour
        (req(74, count=9, span_s=3 * 3600), "cordon", "nvlink-repeats"),
        (req(94), "not_needed", "contained-ecc-repeats"),
        (req(94, count=2, span_s=600), "cordon", "contained-ecc-repeats"),
        (req(63, count=100), "not_needed", None),  # no rule: default never
        (req(48), "cordon", "double-bit-error"),  # WORKFLOW_XID_48: reset at once (the guide, section 九)
    ],
    ids=lambda v: v.codes + f" x{v.count}" if isinstance(v, CordonRequest) else str(v),
)
def test_default_policy(request_: CordonRequest, expected: str, rule: str | None) -> None:
    decision = decide_cordon(request_, node(), FleetView(pool_nodes=100), BreakerState(), POLICY)

    assert (decision.outcome, decision.rule) == (expected, rule), decision.reason
    if rule:
        assert f"rule {rule}" in decision.reason


def test_occurrence_times_decide_the_window_when_given() -> None:
    times = (T0 - timedelta(hours=5), T0 - timedelta(minutes=50), T0 - timedelta(minutes=10), T0)
    request_ = req(74, count=4, span_s=5 * 3600, occurrences=times)

    assert occurrences_in_window(request_, 3600)[0] == 3
    assert occurrences_in_window(request_, 1200)[0] == 2
    assert decide_cordon(request_, node(), FleetView(pool_nodes=100), BreakerState(), POLICY).outcome == "cordon"


def occ(minutes: float, *xids: int, family: str | None = None) -> Occurrence:
    return Occurrence(at=T0 - timedelta(minutes=minutes), xids=xids, family=family)


# The demo's gpu-node-02: three jobs crashed there (Xid 13, the GPU became suspect), then one contained
# ECC error (Xid 94) came with the DBE (Xid 48, 63). The contained-ECC rule counts Xid 94s: one.
SUSPECT_THEN_ECC = (occ(50, 13, family="application"), occ(35, 13, family="application"),
                    occ(20, 13, family="application"), occ(0, 94, 48, 63, family="memory"))


@pytest.mark.parametrize(("match", "facts", "n"), [
    (Match(xids=(94,)), SUSPECT_THEN_ECC, 1),
    (Match(xids=(13,)), SUSPECT_THEN_ECC, 3),
    (Match(families=(Family.MEMORY,)), SUSPECT_THEN_ECC, 1),
    (Match(families=(Family.APPLICATION,)), SUSPECT_THEN_ECC, 3),
    (Match(immediate_actions=(ImmediateAction.WORKFLOW_XID_48,)), SUSPECT_THEN_ECC, 1),
    (Match(immediate_actions=(ImmediateAction.RESTART_APP,)), SUSPECT_THEN_ECC, 4),  # Xid 13 and Xid 94
    (Match(categories=(Category.HARDWARE,)), SUSPECT_THEN_ECC, 4),  # the category is the incident's
    (Match(), SUSPECT_THEN_ECC, 4),
    (Match(xids=(94,)), (occ(25 * 60, 94), occ(60, 94), occ(0, 94)), 2),  # two within the day
    (Match(xids=(74,)), SUSPECT_THEN_ECC, 0),
])
def test_a_rule_counts_the_occurrences_its_match_selects(match: Match, facts: tuple[Occurrence, ...],
                                                         n: int) -> None:
    request_ = req(94, count=len(facts), span_s=3600, category="hardware", occurrence_facts=facts)
    assert occurrences_in_window(request_, 86_400, match)[0] == n


def test_one_contained_ecc_error_after_the_jobs_that_made_the_gpu_suspect_is_not_two() -> None:
    """Issue #23: gpu-node-02 was cordoned by `contained-ecc-repeats: 4 occurrence(s)` after ONE Xid 94."""
    policy = CordonPolicy(rules=tuple(r for r in POLICY.rules if r.name == "contained-ecc-repeats"))
    request_ = req(94, count=4, span_s=3000, category="hardware", occurrence_facts=SUSPECT_THEN_ECC)
    decision = decide_cordon(request_, node(), FleetView(pool_nodes=100), BreakerState(), policy)
    assert decision.outcome == "not_needed"
    assert "1 occurrence(s) matching the rule within 86400 s (4 in all)" in decision.reason
    twice = request_.model_copy(update={"occurrence_facts": (*SUSPECT_THEN_ECC, occ(-10, 94, family="memory"))})
    assert decide_cordon(twice, node(), FleetView(pool_nodes=100), BreakerState(), policy).outcome == "cordon"
    # With the default rules the same incident is cordoned at once for its DBE (Xid 48), by that rule.
    dbe = request_.model_copy(update={"xids": (13, 94, 48, 63)})
    decided = decide_cordon(dbe, node(), FleetView(pool_nodes=100), BreakerState(), POLICY)
    assert (decided.outcome, decided.rule) == ("cordon", "double-bit-error")
    assert "cordon at once for Xid 48 (memory; NVIDIA: WORKFLOW_XID_48)" in decided.reason


def test_cordon_request_for_takes_the_times_of_its_occurrences() -> None:
    inc = IncidentState(incident_id="i", fingerprint="f", node="n1", gpu="G", family="memory", status="open",
                        count=4, first_seen=T0 - timedelta(minutes=50), last_seen=T0, category="hardware")
    request_ = cordon_request_for(inc, codes=(FaultCode(CodeKind.XID, 94),), occurrence_facts=SUSPECT_THEN_ECC)
    assert request_.occurrences == tuple(o.at for o in SUSPECT_THEN_ECC)
    assert request_.occurrence_facts == SUSPECT_THEN_ECC


TRIPPED = BreakerState(tripped=True, tripped_at=T0, reason="pool 'a' has 10 of 100 nodes cordoned")


@pytest.mark.parametrize(
    ("view", "fleet", "breaker", "policy", "expected", "reason_part"),
    [
        (node(exists=False), FleetView(), BreakerState(), POLICY, "node_missing", "does not exist"),
        (node(annotations=OURS, unschedulable=True), FleetView(), BreakerState(), POLICY, "already_cordoned",
         "for this incident"),
        (node(annotations={**OURS, ANN_INCIDENT: "inc-0"}, unschedulable=True), FleetView(), BreakerState(), POLICY,
         "already_cordoned", "incident inc-0"),
        (node(unschedulable=True), FleetView(), BreakerState(), POLICY, "foreign_cordon", "someone else"),
        (node(labels={"xidpipe.io/cordon-opt-out": "true"}), FleetView(), BreakerState(), POLICY, "opted_out",
         "cordon-opt-out=true"),
        (node(labels={"xidpipe.io/pool": "cpu"}), FleetView(), BreakerState(),
         CordonPolicy(scope=Scope(pools=("train-a", "train-b"))), "out_of_scope", "pool 'cpu'"),
        (node(labels={"nvidia.com/gpu.product": "NVIDIA-A100"}), FleetView(), BreakerState(),
         CordonPolicy(scope=Scope(gpu_models=("NVIDIA-H200",))), "out_of_scope", "GPU model 'NVIDIA-A100'"),
        (node(labels={"env": "dev"}), FleetView(), BreakerState(),
         CordonPolicy(scope=Scope(node_selector={"env": "prod"})), "out_of_scope", "env=prod"),
        (node(labels={"xidpipe.io/pool": "train-a"}), FleetView(pool="train-a", pool_nodes=10), BreakerState(),
         CordonPolicy(scope=Scope(pools=("train-a",))), "cordon", "rule gpu-lost"),
        (node(), FleetView(pool_nodes=100), TRIPPED, POLICY, "breaker_open", "an operator must reset it"),
        (node(), FleetView(pool="a", pool_nodes=100, pool_cordoned_by_xidpipe=9), BreakerState(), POLICY, "cordon",
         "rule gpu-lost"),
        (node(), FleetView(pool="a", pool_nodes=100, pool_cordoned_by_xidpipe=10), BreakerState(), POLICY,
         "trip_breaker", "pool 'a' has 10 of 100 nodes"),
        (node(), FleetView(pool="a", pool_nodes=5), BreakerState(), POLICY, "cordon", "rule gpu-lost"),  # min 1
        (node(), FleetView(pool="a", pool_nodes=5, pool_cordoned_by_xidpipe=1), BreakerState(), POLICY,
         "trip_breaker", "limit of 1"),
        (node(), FleetView(pool_nodes=1000, cordons_last_hour=10), BreakerState(), POLICY, "trip_breaker",
         "10 cordons by xidpipe in the last hour"),
        (node(), FleetView(pool_nodes=1000, cordons_last_hour=9), BreakerState(), POLICY, "cordon", "rule gpu-lost"),
    ],
)
def test_node_fleet_and_breaker(view: NodeView, fleet: FleetView, breaker: BreakerState, policy: CordonPolicy,
                                expected: str, reason_part: str) -> None:
    decision = decide_cordon(req(79), view, fleet, breaker, policy)

    assert decision.outcome == expected, decision.reason
    assert reason_part in decision.reason


def test_a_repeat_of_the_cordoned_incident_updates_and_its_redelivery_does_not() -> None:
    cordoned = node(annotations={**OURS, ANN_OCCURRENCES: "3"}, unschedulable=True)

    assert decide_cordon(req(79, count=4), cordoned, FleetView(), BreakerState(), POLICY).outcome == "repeat"
    assert decide_cordon(req(79, count=3), cordoned, FleetView(), BreakerState(), POLICY).outcome == "already_cordoned"


def test_an_application_fault_is_never_cordoned_whatever_the_node_or_breaker() -> None:
    decision = decide_cordon(req(13, count=1000), node(), FleetView(pool_nodes=1), TRIPPED, POLICY)

    assert decision.outcome == "not_needed"


def test_dry_run_is_carried_by_the_decision() -> None:
    assert decide_cordon(req(79), node(), FleetView(), BreakerState(), CordonPolicy(dry_run=True)).dry_run
    assert decide_cordon(req(79), node(), FleetView(), BreakerState(), POLICY, dry_run=True).dry_run
    assert not decide_cordon(req(79), node(), FleetView(), BreakerState(), POLICY).dry_run


@pytest.mark.parametrize(("share", "min_nodes", "pool", "allowed"), [
    (0.10, 1, 100, 10), (0.10, 1, 5, 1), (0.10, 0, 5, 0), (0.29, 1, 100, 29), (0.5, 1, 3, 1), (1.0, 1, 7, 7),
])
def test_pool_allowance(share: float, min_nodes: int, pool: int, allowed: int) -> None:
    policy = CordonPolicy(breaker=Breaker(max_pool_share=share, min_nodes=min_nodes))

    assert pool_allowance(policy, pool) == allowed


@pytest.mark.parametrize(
    ("view", "incident", "expected", "reason_part"),
    [
        (node(annotations=OURS, unschedulable=True), None, "release", "incident inc-1"),
        (node(annotations=OURS, unschedulable=True), "inc-1", "release", "incident inc-1"),
        (node(annotations=OURS, unschedulable=True), "inc-2", "refuse", "not inc-2"),
        (node(unschedulable=True), None, "refuse", "not by xidpipe"),
        (node(), None, "refuse", "carries no cordon by xidpipe"),
        (node(exists=False), None, "node_missing", "does not exist"),
    ],
)
def test_release(view: NodeView, incident: str | None, expected: str, reason_part: str) -> None:
    decision = decide_release(view, incident)

    assert decision.outcome == expected and reason_part in decision.reason


OTHER = {"key": "example.com/other-owner", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "2026-11-29T12:00:00Z"}


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        ([], [{"key": TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}]),
        ([OTHER, NOT_READY], [OTHER, NOT_READY, {"key": TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}]),
        ([OTHER, {"key": TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}], None),
        ([{"key": TAINT_KEY, "value": "memory", "effect": "NoSchedule"}, OTHER],
         [OTHER, {"key": TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}]),
    ],
)
def test_with_our_taint_keeps_every_other_taint(current: list[dict[str, Any]],
                                                expected: list[dict[str, Any]] | None) -> None:
    assert with_our_taint(current, "gpu_lost") == expected


def test_without_our_taint() -> None:
    ours = {"key": TAINT_KEY, "value": "gpu_lost", "effect": "NoSchedule"}

    assert without_our_taint([OTHER, ours, NOT_READY]) == [OTHER, NOT_READY]
    assert without_our_taint([OTHER]) is None


def test_a_request_from_the_streams_incident_takes_the_numbers_of_its_xids() -> None:
    opened = IncidentState(incident_id="v2:0123456789abcdef@x", fingerprint="v2:0123456789abcdef", node="n1",
                           gpu="GPU-5d8c", family="gpu_lost", status="open", count=1, first_seen=T0, last_seen=T0,
                           codes=("Xid 79", "fallen off the bus", "SXid 12028", "Xid 48"))
    codes = (FaultCode(CodeKind.XID, 79), FaultCode(CodeKind.SXID, 12028), FaultCode(CodeKind.XID, 48))

    request_ = cordon_request_for(opened, codes=codes, pods=(PodRef(namespace="ml", name="trainer-0"),))

    assert (request_.node, request_.incident_id, request_.fingerprint) == ("n1", opened.incident_id,
                                                                           opened.fingerprint)
    assert (request_.xids, request_.immediate_actions, request_.family) == (
        (79, 48), ("RESTART_BM", "WORKFLOW_XID_48"), "gpu_lost")
    assert request_.codes == "Xid 79, Xid 48"
    assert request_.pods[0].name == "trainer-0"
    assert decide_cordon(request_, node(), FleetView(pool_nodes=100), BreakerState(), POLICY).outcome == "cordon"


def test_a_request_without_xids_shows_its_family() -> None:
    opened = IncidentState(incident_id="i", fingerprint="f", node="n1", gpu="0000:3b:00.0", family="nvswitch",
                           status="open", count=1, first_seen=T0, last_seen=T0, category="interconnect",
                           codes=("SXid 12028",))

    request_ = cordon_request_for(opened, codes=(FaultCode(CodeKind.SXID, 12028),))

    assert (request_.xids, request_.immediate_actions, request_.codes) == ((), (), "nvswitch")
    assert "no rule matches nvswitch (nvswitch, interconnect)" in decide_cordon(
        request_, node(), FleetView(pool_nodes=100), BreakerState(), POLICY).reason


def test_a_request_names_a_known_family() -> None:
    with pytest.raises(ValidationError, match="unknown fault family 'gpu gone'"):
        req(79).model_validate({**req(79).model_dump(), "family": "gpu gone"})


def test_a_request_and_its_decision_keep_their_names_on_the_wire() -> None:
    request_ = req(79)
    decision = decide_cordon(request_, node(), FleetView(pool_nodes=100), BreakerState(), POLICY)

    assert decision.outcome is CordonOutcome.CORDON and decision.changes_node
    assert json.loads(decision.model_dump_json())["outcome"] == "cordon"
    dumped = json.loads(request_.model_dump_json())
    assert (dumped["family"], dumped["category"], dumped["immediate_actions"]) == (
        "gpu_lost", "hardware", ["RESTART_BM"])
    assert CordonRequest.model_validate_json(request_.model_dump_json()) == request_


@pytest.mark.parametrize(("match", "message"), [
    ({"families": ["gpu_lost", "gpu_gone"]}, "unknown fault family ['gpu_gone']; known: gpu_lost, memory,"),
    ({"categories": ["fleet"]}, "unknown category ['fleet']; known: application, suspected_hardware, hardware,"),
    ({"immediate_actions": ["RESET_GPU", "reset_gpu"]}, "unknown NVIDIA immediate action ['reset_gpu']; known: "
                                                        "RESTART_APP, RESET_GPU,"),
    ({"families": ["memory"], "xids": [2000]}, "Xid codes must be between 1 and 1023, got [2000]"),
])
def test_a_rule_matches_only_names_the_vocabulary_knows(match: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        Match.model_validate(match)


def test_a_rule_match_holds_members() -> None:
    match = Match.model_validate({"families": ["nvlink"], "categories": ["suspected_hardware"],
                                  "immediate_actions": ["RESET_GPU"]})
    assert isinstance(match.families[0], Family) and isinstance(match.categories[0], Category)
    assert isinstance(match.immediate_actions[0], ImmediateAction)
    assert match.model_dump(mode="json") == {"families": ["nvlink"], "xids": [], "categories": ["suspected_hardware"],
                                             "immediate_actions": ["RESET_GPU"]}


def test_every_family_has_its_node_condition_reason() -> None:
    assert set(CONDITION_REASONS) == set(Family)
    assert len(set(CONDITION_REASONS.values())) == len(Family)  # each names its family
    assert condition_reason("gpu_lost") == "GPUFallenOffBus" and condition_reason("no such family") == "GPUFault"
