"""The remediation decision (`models.remediation.decide_remediation`), table-driven: each row is an
incident as the catalog describes its codes (NVIDIA's immediate action per Xid, `models/catalog/xid.tsv`)
and the driver's recovery action (NVML's `nvmlDeviceGpuRecoveryAction_t`), with the history of its
node and card, and the step the ladder takes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from models.catalog import load_catalog
from models.cordon_policy import Breaker, CordonPolicy
from models.remediation import (
    Attempt,
    RemediationSubject,
    admission,
    decide_remediation,
    latest_recovery_action,
    recovery_action_of,
)
from models.remediation_policy import Budgets, Execution, Ladder, RemediationPolicy, Window
from models.vocabulary import Family, ImmediateAction, RecoveryAction, RemediationAction

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
CARD = "serial:1652320031234"
A = RemediationAction


def subject(*xids: int, family: Family | None = None, recovery: RecoveryAction | None = None,
            card: str = CARD) -> RemediationSubject:
    """The incident of these Xids, with NVIDIA's immediate actions as the catalog gives them."""
    cat = load_catalog()
    actions = tuple(dict.fromkeys(a for x in xids if (info := cat.xid(x)) and (a := info.immediate_action)))
    return RemediationSubject(node="gpu-a-017", incident_id="v2:abc@gpu-a-017", family=family or Family.OTHER,
                              card=card, gpu_uuid="GPU-5d8c2a1e", xids=xids, immediate_actions=actions,
                              recovery_action=recovery)


def attempt(remedy: str, outcome: str = "succeeded", *, loop: str = "rl-this", validated: str | None = None,
            days: float = 1.0, card: str = CARD, node: str = "gpu-a-017", family: str = "gpu_lost") -> Attempt:
    return Attempt(loop_id=loop, incident_id=f"inc-{loop}", node=node, card=card, family=family, remedy=remedy,
                   outcome=outcome, validated=validated, at=NOW - timedelta(days=days))


def test_the_catalog_gives_the_actions_the_table_relies_on() -> None:
    cat = load_catalog()
    expected = {79: "RESTART_BM", 95: "RESET_GPU", 119: "RESET_GPU", 48: "WORKFLOW_XID_48", 64: "RESET_GPU",
                13: "RESTART_APP", 74: "WORKFLOW_NVLINK_ERR", 154: "XID_154"}
    assert {x: str(cat.xid(x).immediate_action) for x in expected} == expected  # type: ignore[union-attr]


# (case, subject, history, expected action, words the reason must hold)
FIRST_STEP: list[tuple[str, RemediationSubject, list[Attempt], RemediationAction, str]] = [
    ("Xid 79 fallen off the bus: RESTART_BM", subject(79, family=Family.GPU_LOST), [], A.REBOOT_NODE, "RESTART_BM"),
    ("Xid 95 uncontained ECC: RESET_GPU", subject(95, family=Family.MEMORY), [], A.RESET_GPU, "RESET_GPU"),
    ("Xid 119 GSP RPC timeout: RESET_GPU", subject(119, family=Family.GSP), [], A.RESET_GPU, "RESET_GPU"),
    ("Xid 48 DBE: NVIDIA's Xid 48 workflow resets", subject(48, family=Family.MEMORY), [], A.RESET_GPU,
     "WORKFLOW_XID_48"),
    ("Xid 154 asks for a reboot: the recovery action wins over the catalog",
     subject(119, 154, family=Family.GSP, recovery=RecoveryAction.NODE_REBOOT), [], A.REBOOT_NODE, "NODE_REBOOT"),
    ("Xid 154 asks for a reset (drain and reset)",
     subject(154, family=Family.RECOVERY_ACTION, recovery=RecoveryAction.DRAIN_AND_RESET), [], A.RESET_GPU,
     "DRAIN_AND_RESET"),
    ("recovery action NONE defers to the catalog",
     subject(79, 154, family=Family.GPU_LOST, recovery=RecoveryAction.NONE), [], A.REBOOT_NODE, "RESTART_BM"),
    ("a GPU lost without an Xid (NVML): the family", subject(family=Family.GPU_LOST), [], A.REBOOT_NODE,
     "gpu_lost fault"),
    ("Xid 64 row remapping failure: RMA at once", subject(64, family=Family.MEMORY), [], A.RMA, "Xid 64"),
    ("a driver fault: the driver/kernel matrix, never a reboot loop", subject(family=Family.DRIVER), [], A.NONE,
     "driver/kernel matrix"),
    ("IMEX recovery: people", subject(154, family=Family.RECOVERY_ACTION, recovery=RecoveryAction.RECOVER_IMEX_DOMAIN),
     [], A.NONE, "RECOVER_IMEX_DOMAIN"),
    ("Xid 13 RESTART_APP: nothing to reset", subject(13, family=Family.APPLICATION), [], A.NONE,
     "no NVIDIA action"),
    ("Xid 74 NVLink workflow: people", subject(74, family=Family.NVLINK), [], A.NONE, "no NVIDIA action"),
]


@pytest.mark.parametrize(("case", "s", "history", "action", "words"), FIRST_STEP, ids=[c[0] for c in FIRST_STEP])
def test_first_step(case: str, s: RemediationSubject, history: list[Attempt], action: RemediationAction,
                    words: str) -> None:
    d = decide_remediation(s, history, RemediationPolicy(), NOW, loop_id="rl-this")
    assert d.action == action, d.reason
    assert words in d.reason
    assert d.acts == (action in (A.RESET_GPU, A.REBOOT_NODE))


LOST = subject(79, family=Family.GPU_LOST)
ECC = subject(95, family=Family.MEMORY)
AFTER: list[tuple[str, RemediationSubject, list[Attempt], RemediationAction, str]] = [
    ("a failed reset: one reboot", ECC, [attempt("reset_gpu", "failed", family="memory")], A.REBOOT_NODE,
     "reset failed"),
    ("a reset whose validation failed: one reboot", ECC,
     [attempt("reset_gpu", validated="failed", family="memory")], A.REBOOT_NODE, "failed validation"),
    ("a failed reset, then a failed reboot: people", ECC,
     [attempt("reset_gpu", "failed", family="memory"), attempt("reboot_node", "failed", family="memory")], A.NONE,
     "reboot failed"),
    ("validation failed after a reboot: RMA", LOST, [attempt("reboot_node", validated="failed")], A.RMA,
     "after a node reboot"),
    ("a reboot that never happened: people", LOST, [attempt("reboot_node", "failed")], A.NONE, "power, BMC"),
    ("the same fault on the same card after two remediations within 30 days: RMA", LOST,
     [attempt("reboot_node", loop="rl-1", validated="passed", days=20),
      attempt("reboot_node", loop="rl-2", validated="passed", days=3)], A.RMA, "after 2 remediation(s)"),
    ("one of them outside the window: a reboot again", LOST,
     [attempt("reboot_node", loop="rl-1", validated="passed", days=40),
      attempt("reboot_node", loop="rl-2", validated="passed", days=3)], A.REBOOT_NODE, "RESTART_BM"),
    ("another family's remediations do not count", LOST,
     [attempt("reset_gpu", loop="rl-1", validated="passed", family="memory", days=5),
      attempt("reboot_node", loop="rl-2", validated="passed", days=3)], A.REBOOT_NODE, "RESTART_BM"),
    ("another card's remediations do not count", LOST,
     [attempt("reboot_node", loop="rl-1", validated="passed", card="serial:other", days=5),
      attempt("reboot_node", loop="rl-2", validated="passed", days=3)], A.REBOOT_NODE, "RESTART_BM"),
    ("a remediation that did not hold (validation failed) is no return to count", LOST,
     [attempt("reboot_node", loop="rl-1", validated="failed", days=5),
      attempt("reboot_node", loop="rl-2", validated="passed", days=3)], A.REBOOT_NODE, "RESTART_BM"),
]


@pytest.mark.parametrize(("case", "s", "history", "action", "words"), AFTER, ids=[c[0] for c in AFTER])
def test_the_ladder_goes_on(case: str, s: RemediationSubject, history: list[Attempt], action: RemediationAction,
                            words: str) -> None:
    roomy = RemediationPolicy(budgets=Budgets(per_node=Window(attempts=10, window_s=86400),
                                              per_card=Window(attempts=10, window_s=86400)))
    d = decide_remediation(s, history, roomy, NOW, loop_id="rl-this")
    assert d.action == action, d.reason
    assert words in d.reason


def test_no_reboot_follows_a_failed_reset_when_the_ladder_allows_none() -> None:
    policy = RemediationPolicy(ladder=Ladder(after_failed_reset="none"))
    d = decide_remediation(ECC, [attempt("reset_gpu", "failed", family="memory")], policy, NOW, loop_id="rl-this")
    assert d.action == A.NONE and "no further step" in d.reason


def test_rma_after_is_configurable() -> None:
    history = [attempt("reboot_node", loop="rl-1", validated="passed", days=3)]
    assert decide_remediation(LOST, history, RemediationPolicy(), NOW, loop_id="rl-this").action == A.REBOOT_NODE
    once = RemediationPolicy(ladder=Ladder(rma_after=1))
    assert decide_remediation(LOST, history, once, NOW, loop_id="rl-this").action == A.RMA


def _budget(node: int = 3, card: int = 2) -> RemediationPolicy:
    return RemediationPolicy(budgets=Budgets(per_node=Window(attempts=node, window_s=86400),
                                             per_card=Window(attempts=card, window_s=7 * 86400)))


@pytest.mark.parametrize(("history", "policy", "spent"), [
    ([attempt("reboot_node", loop=f"rl-{i}", card=f"serial:{i}", days=0.1 * i) for i in range(3)], _budget(),
     "node gpu-a-017"),
    ([attempt("reset_gpu", loop=f"rl-{i}", node=f"n{i}", days=i, family="gsp") for i in range(2)], _budget(),
     f"card {CARD}"),
    ([attempt("reset_gpu", "failed", family="memory")], _budget(node=1), "node gpu-a-017"),
])
def test_budgets_spent_hand_the_node_to_people(history: list[Attempt], policy: RemediationPolicy, spent: str) -> None:
    d = decide_remediation(ECC, history, policy, NOW, loop_id="rl-this")
    assert d.action == A.NONE and d.rung == "budget"
    assert spent in d.reason and "budget" in d.reason


def test_attempts_outside_the_window_or_cancelled_leave_the_budget_alone() -> None:
    history = [attempt("reboot_node", loop="rl-old", card="serial:x", days=2),
               attempt("reboot_node", "cancelled", loop="rl-c", card="serial:y", days=0.1)]
    assert decide_remediation(LOST, history, _budget(node=1), NOW, loop_id="rl-this").action == A.REBOOT_NODE


def test_a_step_the_site_carries_out_is_a_hand_off_with_its_remedy() -> None:
    policy = RemediationPolicy(execution=Execution(reboot_node="hand_off"))
    d = decide_remediation(LOST, [], policy, NOW, loop_id="rl-this")
    assert (d.action, d.remedy) == (A.HAND_OFF, "reboot_node")
    assert d.acts and "site's tooling" in d.reason
    assert decide_remediation(ECC, [], policy, NOW, loop_id="rl-this").action == A.RESET_GPU


@pytest.mark.parametrize(("message", "action"), [
    ("NVRM: Xid (PCI:0000:1a:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
     RecoveryAction.GPU_RESET),
    ("NVRM: Xid (PCI:0000:1a:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) to 0x2 "
     "(Node Reboot Required)", RecoveryAction.NODE_REBOOT),
    ("GPU recovery action 7", RecoveryAction.SYSTEM_REBOOT),
    ("GPU recovery action 99", None),
    ("Xid 79: GPU has fallen off the bus", None),
])
def test_the_recovery_action_of_a_report(message: str, action: RecoveryAction | None) -> None:
    assert recovery_action_of(message) == action


def test_the_latest_recovery_action_is_the_one_that_counts() -> None:
    reports = [(NOW, "GPU recovery action 2"), (NOW - timedelta(minutes=1), "GPU recovery action 1"),
               (NOW + timedelta(minutes=1), "Xid 79: fallen off the bus")]
    assert latest_recovery_action(reports) == RecoveryAction.NODE_REBOOT
    assert latest_recovery_action([]) is None


@pytest.mark.parametrize(("in_flight", "in_pool", "pool_nodes", "breaker", "admitted", "words"), [
    (0, 0, 100, {}, True, "slot 1 of 10"),
    (5, 9, 100, {}, True, "slot 10 of 10"),
    (5, 10, 100, {}, False, "allows 10"),
    (0, 0, 5, {}, True, "slot 1 of 1"),  # a small pool: the breaker's minimum of one
    (0, 1, 5, {}, False, "allows 1"),
    (20, 0, 500, {"max_pool_share": 1.0}, False, "the cap is 20"),
])
def test_admission_caps_remediations_in_flight(in_flight: int, in_pool: int, pool_nodes: int, breaker: dict[str, Any],
                                               admitted: bool, words: str) -> None:
    policy = CordonPolicy(breaker=Breaker(**breaker))
    ok, why = admission(in_flight, in_pool, "train", pool_nodes, policy)
    assert ok is admitted and words in why


def test_a_pool_share_of_its_own_caps_remediations_below_the_breakers() -> None:
    policy = CordonPolicy(breaker=Breaker(max_pool_share=1.0, max_per_hour=1000),
                          remediation=RemediationPolicy(budgets=Budgets(max_pool_share=0.02)))
    assert admission(9, 9, "cap", 500, policy)[0]
    ok, why = admission(10, 10, "cap", 500, policy)
    assert not ok and "(2%) allows 10" in why


def test_the_ladder_validates_like_the_rest_of_the_policy() -> None:
    with pytest.raises(ValueError, match="immediate_actions"):
        CordonPolicy.model_validate({"remediation": {"ladder": {"reset_gpu": {"immediate_actions": ["REBOOT_PLS"]}}}})
    with pytest.raises(ValueError, match="unknown placeholder"):
        CordonPolicy.model_validate({"remediation": {"jobs": {"reset_gpu": {"image": "x", "command": ["{gpuu}"]}}}})
    assert CordonPolicy().remediation.ladder.reboot_node.immediate_actions == (ImmediateAction.RESTART_BM,
                                                                              ImmediateAction.RESTART_VM)
