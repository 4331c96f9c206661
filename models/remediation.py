"""The remediation decision: after xidpipe cordoned a node, what is the next step for its fault, and
why. One pure function, `decide_remediation`, from the incident (family, codes, NVIDIA's immediate
action, the driver's latest GPU recovery action), the remediation history of its node and card, and
the policy's ladder (`models.remediation_policy`), to one of: none (people decide), reset the GPU,
reboot the node, hand off to the site's tooling, RMA. `xidpipe replay`, the cordon step that opens a
loop and the loop itself (`respond.remediation`) all ask it.

The ladder, in order (docs/remediation.md):

1. RMA at once for the faults the policy names (Xid 64: row remapping failed, no spare rows left).
2. Never reset or reboot for the faults the policy hands to people: a driver fault points at the
   driver/kernel matrix (the guide's section 16), not at a reboot loop.
3. RMA on repeat: the same fault family on the same card after `rma_after` remediations that
   returned it to service within `rma_window_s` ("replace on repeat", the guide's section 10).
4. What this loop already tried: a failed reset (or one whose validation failed) is followed by one
   reboot; a failed validation after a reboot is RMA; a reboot that did not happen goes to people.
5. NVIDIA's action: the driver's latest recovery action first (GPU_RESET, NODE_REBOOT, ... : what the
   driver asks for now), then the catalog's immediate action (RESET_GPU, RESTART_BM, ...), then the
   family (a GPU fallen off the bus is rebooted).
6. Budgets: attempts per node and per card within their windows; spent means people decide.
7. Execution: a step the policy hands to the site's tooling is `hand_off`, with the remedy it asks for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from models.catalog import RECOVERY_ACTIONS
from models.cordon import CordonRequest
from models.cordon_policy import CordonPolicy
from models.remediation_policy import Ladder, RemediationPolicy, Remedy, Trigger
from models.vocabulary import Family, ImmediateAction, RecoveryAction, RemediationAction

AttemptOutcome = Literal["in_flight", "succeeded", "failed", "cancelled"]
Validated = Literal["passed", "failed"]
_A = RemediationAction


@dataclass(frozen=True, slots=True)
class RemediationSubject:
    """The incident of a cordoned node, as the remediation decision sees it."""

    node: str
    incident_id: str
    family: Family
    card: str = ""  # the GPU ledger's key of the card (`models.ledger.card_key`), "" when not known
    gpu_uuid: str | None = None
    xids: tuple[int, ...] = ()
    immediate_actions: tuple[ImmediateAction, ...] = ()
    recovery_action: RecoveryAction | None = None  # the driver's latest (Xid 154, NVML)

    @property
    def codes(self) -> str:
        return ", ".join(f"Xid {x}" for x in self.xids) or str(self.family)


class Attempt(BaseModel):
    """One reset, reboot or hand-off xidpipe reserved: what it was for and what came of it."""

    model_config = ConfigDict(frozen=True)

    loop_id: str
    incident_id: str
    node: str
    card: str = ""
    family: str
    remedy: Remedy
    outcome: AttemptOutcome
    validated: Validated | None = None
    at: datetime


class RemediationDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    action: RemediationAction
    reason: str
    rung: str  # which rung of the ladder decided: rma_now, manual, rma_repeat, after_failure, nvidia, budget, ...
    remedy: Remedy | None = None  # what a reset, reboot or hand-off does

    @property
    def acts(self) -> bool:
        """Does it reset or reboot something (itself, or through the site's tooling)?"""
        return self.remedy is not None and self.action in (_A.RESET_GPU, _A.REBOOT_NODE, _A.HAND_OFF)


def subject_of(req: CordonRequest, *, card: str = "",
               recovery_action: RecoveryAction | None = None) -> RemediationSubject:
    gpu = req.gpu if req.gpu.startswith(("GPU-", "MIG-")) else None
    return RemediationSubject(node=req.node, incident_id=req.incident_id, family=req.family, card=card, gpu_uuid=gpu,
                              xids=req.xids, immediate_actions=req.immediate_actions,
                              recovery_action=recovery_action)


# --- NVIDIA's recovery action -----------------------------------------------------------------------

_KERNEL_RECOVERY = re.compile(r"recovery action changed from .*? to (0x[0-9a-fA-F]+)")
_NVML_RECOVERY = re.compile(r"recovery action (\d+)\s*$")


def recovery_action_of(message: str) -> RecoveryAction | None:
    """The recovery action a fault report names: the kernel's Xid 154 line ("GPU recovery action
    changed from 0x0 (None) to 0x1 (GPU Reset Required)") or the NVML event's ("GPU recovery action 1")."""
    if "recovery action" not in message:
        return None
    found = _KERNEL_RECOVERY.search(message)
    value = int(found.group(1), 16) if found else None
    if value is None:
        nvml = _NVML_RECOVERY.search(message)
        value = int(nvml.group(1)) if nvml else None
    name = RECOVERY_ACTIONS.get(value) if value is not None else None
    return RecoveryAction(name) if name is not None else None


def latest_recovery_action(reports: Iterable[tuple[datetime, str]]) -> RecoveryAction | None:
    """The recovery action of the latest report (time, message) that names one."""
    found = [(at, action) for at, message in reports if (action := recovery_action_of(message)) is not None]
    return max(found, key=lambda p: p[0])[1] if found else None


# --- the ladder ------------------------------------------------------------------------------------


def _matched(trigger: Trigger, s: RemediationSubject, *, recovery: bool = True) -> str | None:
    """What of the subject the trigger names, or None."""
    if recovery and s.recovery_action is not None and s.recovery_action in trigger.recovery_actions:
        return f"the driver's recovery action {s.recovery_action}"
    actions = [a for a in s.immediate_actions if a in trigger.immediate_actions]
    if actions:
        return f"NVIDIA's action {', '.join(actions)} for {s.codes}"
    xids = [x for x in s.xids if x in trigger.xids]
    if xids:
        return ", ".join(f"Xid {x}" for x in xids)
    if s.family in trigger.families:
        return f"a {s.family} fault"
    return None


def first_step(s: RemediationSubject, ladder: Ladder) -> tuple[Remedy | None, str]:
    """The remedy NVIDIA asks for: the driver's latest recovery action first, then the catalog's
    immediate action, then the family. NONE as the recovery action defers to the catalog."""
    if s.recovery_action is not None and s.recovery_action != RecoveryAction.NONE:
        for remedy, trigger in (("reset_gpu", ladder.reset_gpu), ("reboot_node", ladder.reboot_node)):
            if s.recovery_action in trigger.recovery_actions:
                return remedy, f"the driver's recovery action is {s.recovery_action}"  # type: ignore[return-value]
    for remedy, trigger in (("reboot_node", ladder.reboot_node), ("reset_gpu", ladder.reset_gpu)):
        why = _matched(trigger, s, recovery=False)
        if why is not None:
            return remedy, why  # type: ignore[return-value]
    return None, f"no NVIDIA action for {s.codes} ({s.family}) asks for a GPU reset or a node reboot"


def _remediations_of_card(s: RemediationSubject, history: Sequence[Attempt], loop_id: str | None, now: datetime,
                          window_s: float) -> list[str]:
    """Earlier loops that returned this card to service after a remediation of the same fault family
    within the window, oldest first."""
    loops: dict[str, datetime] = {}
    for a in history:
        if (a.card and a.card == s.card and a.loop_id != loop_id and a.family == s.family
                and a.outcome == "succeeded" and a.validated != "failed"
                and 0 <= (now - a.at).total_seconds() <= window_s):
            loops.setdefault(a.loop_id, a.at)
    return sorted(loops, key=lambda k: loops[k])


def _after_failure(this: Sequence[Attempt], ladder: Ladder) -> RemediationDecision | None:
    """What follows this loop's last attempt when it failed (or its validation did); None when it did not."""
    last = this[-1] if this else None
    if last is None or not (last.outcome == "failed" or last.validated == "failed"):
        return None
    what = "failed" if last.outcome == "failed" else "was followed by a failed validation"
    reboots = sum(1 for a in this if a.remedy == "reboot_node")
    if last.remedy == "reset_gpu":
        if ladder.after_failed_reset == "reboot_node" and reboots < ladder.max_reboots:
            return RemediationDecision(action=_A.REBOOT_NODE, remedy="reboot_node", rung="after_failure",
                                       reason=f"the GPU reset {what}: one node reboot follows")
        return RemediationDecision(action=_A.NONE, rung="after_failure",
                                   reason=f"the GPU reset {what} and the ladder allows no further step "
                                          f"({reboots} reboot(s) of {ladder.max_reboots} done): people decide")
    if last.validated == "failed" and ladder.after_failed_validation == "rma":
        return RemediationDecision(action=_A.RMA, rung="after_failure",
                                   reason="validation failed after a node reboot: the card is to be replaced")
    return RemediationDecision(action=_A.NONE, rung="after_failure",
                               reason=f"the node reboot {what}: people decide (power, BMC, the card's seating)")


def _budget_refusal(s: RemediationSubject, history: Sequence[Attempt], policy: RemediationPolicy,
                    now: datetime) -> str | None:
    """Why one more attempt would pass a budget, or None. Every reserved attempt counts, whatever came of it
    (a cancelled one did not run)."""
    spent = [a for a in history if a.outcome != "cancelled"]
    windows = [("node", s.node, policy.budgets.per_node)]
    if s.card:
        windows.append(("card", s.card, policy.budgets.per_card))
    for what, name, window in windows:
        used = sum(1 for a in spent if (a.node if what == "node" else a.card) == name
                   and 0 <= (now - a.at).total_seconds() <= window.window_s)
        if used >= window.attempts:
            return (f"{used} remediation attempt(s) on {what} {name} within {window.window_s:.0f} s: the budget of "
                    f"{window.attempts} is spent, people decide")
    return None


def decide_remediation(s: RemediationSubject, history: Sequence[Attempt], policy: RemediationPolicy, now: datetime,
                       *, loop_id: str | None = None) -> RemediationDecision:
    """The next step for the cordoned node's fault, and why (`history`: the attempts of its node and its
    card, this loop's among them, oldest first)."""
    ladder = policy.ladder
    why = _matched(ladder.rma_now, s)
    if why is not None:
        return RemediationDecision(action=_A.RMA, rung="rma_now", reason=f"{why}: the card is to be replaced")
    why = _matched(ladder.manual, s)
    if why is not None:
        hint = (" (check the driver/kernel matrix: the module built for the running kernel, its signature, "
                "then validate; guide section 16)" if s.family == Family.DRIVER else "")
        return RemediationDecision(action=_A.NONE, rung="manual",
                                   reason=f"{why}: xidpipe neither resets nor reboots for it, people decide{hint}")
    earlier = _remediations_of_card(s, history, loop_id, now, ladder.rma_window_s)
    if len(earlier) >= ladder.rma_after:
        return RemediationDecision(action=_A.RMA, rung="rma_repeat", reason=(
            f"the same fault ({s.family}) on card {s.card} after {len(earlier)} remediation(s) within "
            f"{ladder.rma_window_s / 86400:.0f} days: replace on repeat"))
    this = [a for a in history if loop_id is not None and a.loop_id == loop_id]
    decision = _after_failure(this, ladder)
    if decision is None:
        remedy, why = first_step(s, ladder)
        if remedy is None:
            return RemediationDecision(action=_A.NONE, rung="nvidia", reason=f"{why}: people decide")
        done = sum(1 for a in this if a.remedy == remedy)
        limit = ladder.max_resets if remedy == "reset_gpu" else ladder.max_reboots
        if done >= limit:
            return RemediationDecision(action=_A.NONE, rung="nvidia", reason=(
                f"{why}, but this loop did {done} of {limit} already: people decide"))
        decision = RemediationDecision(action=_A(remedy), remedy=remedy, rung="nvidia", reason=why)
    if decision.remedy is None:
        return decision
    refusal = _budget_refusal(s, history, policy, now)
    if refusal is not None:
        return RemediationDecision(action=_A.NONE, rung="budget", reason=f"{decision.reason}; but {refusal}")
    if policy.executor_of(decision.remedy) == "hand_off":
        return decision.model_copy(update={"action": _A.HAND_OFF,
                                           "reason": f"{decision.reason}; the site's tooling carries it out"})
    return decision


# --- the cap on remediations in flight ---------------------------------------------------------------


def admission(in_flight: int, in_flight_pool: int, pool: str, pool_nodes: int,
              policy: CordonPolicy) -> tuple[bool, str]:
    """May one more loop leave the queue? Remediations in flight are capped across the cluster
    (`budgets.max_in_flight`) and per pool by a share of its nodes (the breaker's, unless
    `budgets.max_pool_share` sets one of its own; at least the breaker's `min_nodes`)."""
    cap = policy.remediation.budgets.max_in_flight
    if in_flight >= cap:
        return False, f"{in_flight} remediations in flight: the cap is {cap}"
    share = policy.remediation.budgets.max_pool_share or policy.breaker.max_pool_share
    allowed = max(policy.breaker.min_nodes, math.floor(share * pool_nodes + 1e-9))
    if in_flight_pool >= allowed:
        return False, (f"pool '{pool}' has {in_flight_pool} of {pool_nodes} nodes in remediation: its share "
                       f"({share:.0%}) allows {allowed}")
    return True, f"slot {in_flight_pool + 1} of {allowed} in pool '{pool}', {in_flight + 1} of {cap} in the cluster"
