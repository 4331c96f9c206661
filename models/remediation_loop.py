"""The remediation loop's stages, decided purely from what the adapter read (`respond.remediation`).

    queued → evidence → draining → executing → validating → returning → returned
                                       ↑            │
                                       └─ the ladder goes on (a failed reset: one reboot) ─┘
    and the final stages rma, manual (people decide), cancelled, dry_run.

Each stage's question is one function here: was the loop cancelled (`cancelled`), is the evidence
stored (`evidence_outcome`), is the node drained (`drain_outcome`), did the reset or the reboot happen
(`execution_outcome`: a reboot is confirmed by a new boot ID and Ready, never by its Job alone), did
validation pass (`validation_outcome`: DCGM's verdict and no new fault since the remediation
started). The adapter persists each stage before the effect it leads to, makes every effect
idempotent by name, and asks again after a restart: what these functions answer from the cluster's
current state is the same, so a killed responder neither repeats nor loses an effect.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from models.dcgm_diag import DiagResult, parse_diag
from models.remediation import RemediationDecision
from models.remediation_jobs import BugReport, bug_report_of, handoff_result, job_name, termination_text
from models.remediation_policy import RemediationPolicy, Remedy
from models.vocabulary import RemediationAction, RemediationStage

JobPhase = Literal["missing", "pending", "running", "succeeded", "failed"]
Result = Literal["wait", "succeeded", "failed"]
ACTIVE_STAGES: tuple[RemediationStage, ...] = (
    RemediationStage.EVIDENCE, RemediationStage.DRAINING, RemediationStage.EXECUTING, RemediationStage.VALIDATING,
    RemediationStage.RETURNING)


@dataclass(frozen=True, slots=True)
class JobState:
    """A Job as read: its phase, its pod's termination message, why it failed."""

    name: str
    phase: JobPhase
    message: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class NodeState:
    """The node as the loop looks at it."""

    exists: bool
    cordoned_for: str | None = None  # the incident xidpipe holds it cordoned for (annotation and unschedulable)
    released_by: str | None = None  # who released it (xidpipe.io/released-by), when someone did
    boot_id: str = ""
    ready: bool = False
    handoff_result: str | None = None  # xidpipe.io/remediation-result, written by the site's tooling


@dataclass(frozen=True, slots=True)
class Outcome:
    result: Result
    reason: str


def _age(since: datetime, now: datetime) -> float:
    return (now - since).total_seconds()


def cancelled(node: NodeState, incident_id: str, requested: str | None) -> str | None:
    """Why the loop ends as cancelled, or None: an operator cancelled it, or the node is no longer
    cordoned by xidpipe for this incident (an uncordon, `xidpipe node release`, the node deleted)."""
    if requested:
        return requested
    if not node.exists:
        return "the node no longer exists"
    if node.cordoned_for != incident_id:
        who = f" by {node.released_by}" if node.released_by else ""
        return f"the node was uncordoned{who}: an operator took it over, the loop stops"
    return None


def evidence_outcome(node_capture: bool, cluster_stored: bool, bug_report: JobState | None, opened_at: datetime,
                     now: datetime, policy: RemediationPolicy) -> Outcome:
    """Is the incident's evidence stored, so that a reset or reboot may destroy the node's state?"""
    waited = _age(opened_at, now)
    missing: list[str] = []
    if policy.evidence.require_node_capture and not node_capture:
        missing.append("the node's capture of the fault")
    if not cluster_stored:
        missing.append("the cluster's evidence")
    if bug_report is not None:
        if bug_report.phase == "failed":
            return Outcome("failed", f"nvidia-bug-report.sh failed on the node ({bug_report.reason or 'Job failed'}):"
                                     " nothing is reset before it ran")
        if bug_report.phase == "succeeded" and bug_report_of(bug_report.message) is None:
            return Outcome("failed", "nvidia-bug-report.sh left no report summary: nothing is reset before it ran")
        if bug_report.phase != "succeeded":
            missing.append("nvidia-bug-report.sh's report")
    if not missing:
        return Outcome("succeeded", "the evidence is stored" + (" and the bug report attached" if bug_report else ""))
    if waited > policy.evidence.wait_s:
        return Outcome("failed", f"after {waited:.0f} s still no {', '.join(missing)}: a reset would destroy what "
                                 "was not kept, people decide")
    return Outcome("wait", f"waiting for {', '.join(missing)}")


def bug_report(job: JobState | None) -> BugReport | None:
    return bug_report_of(job.message) if job is not None and job.phase == "succeeded" else None


DrainVerdict = Literal["done", "wait", "proceed", "hold"]


def drain_outcome(remaining: int, blocked: dict[str, str], failed: dict[str, str], started_at: datetime,
                  now: datetime, policy: RemediationPolicy) -> tuple[DrainVerdict, str]:
    """After a pass of evictions: done, wait (retry the refused ones), proceed past the deadline, or
    hold (past the deadline, a budget still refuses: the loop waits for people)."""
    if remaining == 0 and not blocked and not failed:
        return "done", "the pods are evicted"
    waited = _age(started_at, now)
    stuck = {**blocked, **failed}
    shown = "; ".join(f"{k}: {v}" for k, v in sorted(stuck.items())[:5])
    if waited <= policy.drain.deadline_s:
        return "wait", f"{len(stuck) or remaining} pod(s) not evicted yet ({shown or 'terminating'})"
    if policy.drain.past_deadline == "proceed":
        return "proceed", (f"past the drain deadline of {policy.drain.deadline_s:.0f} s, {len(stuck)} pod(s) still "
                           f"refused ({shown}): proceeding as the policy says")
    return "hold", (f"past the drain deadline of {policy.drain.deadline_s:.0f} s, {len(stuck)} pod(s) still refused "
                    f"({shown}): a disruption budget is never bypassed, the loop holds for people")


def execution_outcome(remedy: Remedy, via: RemediationAction, job: JobState | None, node: NodeState,
                      boot_before: str, key: str, started_at: datetime, now: datetime,
                      policy: RemediationPolicy) -> Outcome:
    """Did the reset or reboot happen? A reboot: the node's boot ID changed and it is Ready again
    (whatever its Job says: a rebooting node kills it). A reset: its Job completed, or the site's
    tooling answered. Past the deadline without that, it failed."""
    deadline = policy.execution.reboot_deadline_s if remedy == "reboot_node" else policy.execution.reset_deadline_s
    late = _age(started_at, now) > deadline
    if remedy == "reboot_node":
        if node.boot_id and boot_before and node.boot_id != boot_before:
            if node.ready:
                return Outcome("succeeded", f"the node rebooted: boot ID {boot_before} → {node.boot_id}, Ready")
            return Outcome("failed" if late else "wait", f"the node rebooted (boot ID {node.boot_id}) but is not Ready"
                                                         + (f" after {deadline:.0f} s" if late else " yet"))
        if via == RemediationAction.HAND_OFF:
            answer = handoff_result(node.handoff_result, key)
            if answer is not None and answer[0] == "failed":
                return Outcome("failed", f"the site's tooling did not reboot the node: {answer[1]}")
        elif job is not None and job.phase == "failed":
            return Outcome("failed", f"the reboot Job {job.name} failed and the boot ID did not change"
                                     f"{': ' + job.reason if job.reason else ''}")
        if late:
            return Outcome("failed", f"the node did not come back with a new boot ID within {deadline:.0f} s")
        return Outcome("wait", "waiting for the node to reboot (a new boot ID, then Ready)")
    if via == RemediationAction.HAND_OFF:
        answer = handoff_result(node.handoff_result, key)
        if answer is not None:
            return Outcome(answer[0], answer[1])
    elif job is not None and job.phase in ("succeeded", "failed"):
        if job.phase == "succeeded":
            return Outcome("succeeded", f"the GPU reset Job {job.name} completed")
        return Outcome("failed", f"the GPU reset Job {job.name} failed{': ' + job.reason if job.reason else ''}")
    if late:
        return Outcome("failed", f"the GPU reset was not confirmed within {deadline:.0f} s")
    return Outcome("wait", "waiting for the GPU reset")


def validation_outcome(job: JobState, new_fault: str | None, started_at: datetime, now: datetime,
                       policy: RemediationPolicy) -> tuple[Outcome, DiagResult | None]:
    """Did validation pass: DCGM's verdict, and no new fault on the card or node since the remediation?"""
    if job.phase in ("succeeded", "failed"):
        diag = parse_diag(termination_text(job.message))
        if new_fault:
            return Outcome("failed", f"a new fault since the remediation: {new_fault}"), diag
        if diag.passed and job.phase == "succeeded":
            return Outcome("succeeded", f"dcgmi diag -r {policy.validation.level} passed: {diag.summary}"), diag
        if job.phase == "failed" and diag.passed:
            return Outcome("failed", f"the validation Job failed ({job.reason or 'exit status'}) although its output "
                                     "reads as a pass"), diag
        found = f" ({'; '.join(diag.findings[:3])})" if diag.findings else ""
        return Outcome("failed", f"dcgmi diag -r {policy.validation.level} failed: {diag.summary}{found}"), diag
    if _age(started_at, now) > policy.validation.deadline_s:
        return Outcome("failed", f"validation did not finish within {policy.validation.deadline_s:.0f} s"), None
    if new_fault:
        return Outcome("failed", f"a new fault since the remediation: {new_fault}"), None
    return Outcome("wait", "waiting for the validation Job"), None


def overdue(stage: RemediationStage, deadline_at: datetime, now: datetime) -> bool:
    """A loop not final past its deadline: stuck (the metric and the alert)."""
    return stage not in (RemediationStage.RETURNED, RemediationStage.RMA, RemediationStage.MANUAL,
                         RemediationStage.CANCELLED, RemediationStage.DRY_RUN) and now > deadline_at


def final_stage(decision: RemediationDecision) -> RemediationStage | None:
    """The final stage a decision leads to at once (RMA, people), or None when it acts."""
    if decision.action == RemediationAction.RMA:
        return RemediationStage.RMA
    if not decision.acts:
        return RemediationStage.MANUAL
    return None


def dry_run_plan(decision: RemediationDecision, policy: RemediationPolicy, loop: str, pods: int) -> list[str]:
    """What the loop would do, step by step, for a decision made in dry run."""
    stage = final_stage(decision)
    if stage is not None:
        return [f"would end as {stage}: {decision.reason}"]
    assert decision.remedy is not None
    mode = policy.drain.reset_gpu if decision.remedy == "reset_gpu" else policy.drain.reboot_node
    steps = ["would wait for the incident's evidence (the node's capture and the cluster's)"]
    if policy.evidence.bug_report:
        steps.append(f"would run nvidia-bug-report.sh (Job {job_name(loop, 'bug_report', 1)})")
    steps.append(f"would drain: {mode}" + (f" ({pods} pod(s) named by the incident)" if mode == "gpu" else ""))
    if decision.action == RemediationAction.HAND_OFF:
        steps.append(f"would hand {decision.remedy} to the site's tooling (annotation"
                     f"{' and webhook' if policy.execution.webhook_url else ''})")
    else:
        steps.append(f"would create Job {job_name(loop, decision.remedy, 1)} ({decision.remedy})")
    if policy.validation.enabled:
        steps.append(f"would validate with dcgmi diag -r {policy.validation.level} "
                     f"(Job {job_name(loop, 'validation', 1)})")
    steps.append("would lift xidpipe's cordon once validation passed")
    return steps
