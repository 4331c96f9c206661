"""The remediator's stages from the remedy on (`respond.remediation.loop.Remediator` is built on this):

- executing: the attempt is reserved in SQL (the budgets re-checked by the ladder at that moment),
  then its Job is created (or the hand-off requested: a node annotation, and the webhook when set);
  a reboot is confirmed by a new boot ID and Ready, a reset by its Job or the site's answer;
- validating: the DCGM Job; its output read and kept in the loop; a pass with no new fault since the
  remediation started returns the node, anything else lets the ladder go on (a reboot after a reset,
  RMA after a reboot);
- returning: xidpipe's cordon lifted (`respond.remediation.returns.return_to_service`'s steps: the
  release, then the return hooks), the incident `repaired`, the ledger told;
- the final stages RMA (the card marked in the ledger, the incident `rma`) and manual.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from history.remediation_inputs import LoopInputs, new_fault_since
from history.remediation_store import AttemptRow, LoopRow, RemediationStore, Reservation
from history.rma import record_ledger_event
from models.remediation import RemediationDecision
from models.remediation_jobs import ANN_HANDOFF_REQUEST, bug_report_of, handoff_request, job_name
from models.remediation_loop import JobState, NodeState, execution_outcome, final_stage, validation_outcome
from models.remediation_policy import Remedy
from models.vocabulary import RemediationAction, RemediationStage
from respond.errors import ActionError, PermanentError, TemporaryError
from respond.lifecycle import record_lifecycle_step
from respond.remediation.returns import Returned, run_return_hooks

if TYPE_CHECKING:
    from collections.abc import Callable

    from models.cordon_policy import CordonPolicy
    from respond.cordon.executor import CordonExecutor
    from respond.remediation.port import LoopCluster

log = logging.getLogger(__name__)
Stage = RemediationStage
OUTPUT_MAX = 256 * 1024  # the validation's output kept with its attempt (attached to the ticket)


class Execution:
    """The stages from the remedy on; the remediator provides the state and helpers declared here."""

    store: RemediationStore
    cluster: LoopCluster
    executor: CordonExecutor
    webhook: Callable[[str, str, str], int]

    @property
    def policy(self) -> CordonPolicy:
        raise NotImplementedError

    def _inputs(self, loop: LoopRow) -> LoopInputs:
        raise NotImplementedError

    def _decide(self, loop: LoopRow, inputs: LoopInputs, now: datetime) -> RemediationDecision:
        raise NotImplementedError

    def _move(self, loop: LoopRow, stage: Stage, reason: str, now: datetime, **updates: Any) -> LoopRow | None:
        raise NotImplementedError

    def _note(self, loop: LoopRow, reason: str, now: datetime,
              details: dict[str, Any] | None = None) -> LoopRow | None:
        raise NotImplementedError

    def _job(self, loop: LoopRow, kind: Any, seq: int, inputs: LoopInputs) -> str:
        raise NotImplementedError

    # --- executing --------------------------------------------------------------------------------

    def _executing(self, loop: LoopRow, node: NodeState, now: datetime) -> LoopRow | None:
        assert loop.remedy in ("reset_gpu", "reboot_node")
        inputs = self._inputs(loop)
        attempt = self.store.attempt(loop.loop_id, loop.remedy, loop.attempt)
        if attempt is None:
            return self._reserve(loop, node, inputs, now)
        if attempt.outcome == "succeeded":  # finished before a restart: go on
            return self._to_validation(loop, attempt, now)
        if attempt.outcome != "in_flight":
            return self._ladder(loop, inputs, now, f"attempt {attempt.seq} {attempt.outcome}: {attempt.reason}")
        job = None
        if attempt.via == "job":
            job = self.cluster.job_state(attempt.job_name)
            if job.phase == "missing" and not _rebooted(attempt, node):  # reserved before a restart, never created
                refused = self._create(loop, loop.remedy, loop.attempt, inputs)
                if refused is not None:
                    return self._failed(loop, attempt, inputs, now, refused)
        else:
            self._hand_off(loop, attempt, inputs, now)
        via = RemediationAction.HAND_OFF if attempt.via == "hand_off" else RemediationAction(loop.remedy)
        remedy: Remedy = "reset_gpu" if loop.remedy == "reset_gpu" else "reboot_node"
        before = str(attempt.details.get("boot_id_before") or "")
        out = execution_outcome(remedy, via, job, node, before, attempt.job_name, attempt.reserved_at, now,
                                self.policy.remediation)
        if out.result == "wait":
            return self._note(loop, out.reason, now)
        if out.result == "failed":
            return self._failed(loop, attempt, inputs, now, out.reason, job)
        self.store.finish(loop.loop_id, attempt.kind, attempt.seq, out.result, out.reason, at=now,
                          details={**attempt.details, "job": _job_details(job)})
        done = self.store.attempt(loop.loop_id, attempt.kind, attempt.seq)
        assert done is not None
        return self._to_validation(loop, done, now)

    def _failed(self, loop: LoopRow, attempt: AttemptRow, inputs: LoopInputs, now: datetime, why: str,
                job: JobState | None = None) -> LoopRow | None:
        self.store.finish(loop.loop_id, attempt.kind, attempt.seq, "failed", why, at=now,
                          details={**attempt.details, "job": _job_details(job)})
        return self._ladder(loop, inputs, now, why)

    def _create(self, loop: LoopRow, kind: Any, seq: int, inputs: LoopInputs) -> str | None:
        """Create the Job; why not when the cluster refuses it for good (a retry would be refused again)."""
        try:
            self._job(loop, kind, seq, inputs)
        except PermanentError as exc:
            return f"the cluster refused the {kind} Job: {exc.message}"
        return None

    def _reserve(self, loop: LoopRow, node: NodeState, inputs: LoopInputs, now: datetime) -> LoopRow | None:
        """Reserve the attempt (the ladder asked again: the budgets as they stand now), then act."""
        with self.executor.store.exclusive():
            decision = self._decide(loop, inputs, now)
            if decision.remedy != loop.remedy or not decision.acts:
                return self._redirect(loop, decision, inputs, now)
            via = "hand_off" if decision.action == RemediationAction.HAND_OFF else "job"
            name = job_name(loop.loop_id, loop.remedy, loop.attempt)  # type: ignore[arg-type]
            reserved = self.store.change(
                loop, at=now, reason=f"attempt {loop.attempt} reserved: {decision.reason}", boot_id=node.boot_id,
                reserve=Reservation(loop.remedy or "", loop.attempt, via, name,
                                    {"boot_id_before": node.boot_id, "decision": decision.reason}))
        if reserved is None:
            return None
        attempt = self.store.attempt(loop.loop_id, loop.remedy or "", loop.attempt)
        assert attempt is not None
        if via == "job":
            refused = self._create(reserved, loop.remedy, loop.attempt, inputs)
            if refused is not None:
                return self._failed(reserved, attempt, inputs, now, refused)
        else:
            self._hand_off(reserved, attempt, inputs, now)
        return reserved

    def _hand_off(self, loop: LoopRow, attempt: AttemptRow, inputs: LoopInputs, now: datetime) -> None:
        """Ask the site's tooling (idempotent: the same annotation, the same webhook key)."""
        body = handoff_request(attempt.job_name, attempt.kind, loop.node, inputs.gpu_uuid or "", loop.incident_id,
                               attempt.reserved_at)
        self.cluster.annotate(loop.node, {ANN_HANDOFF_REQUEST: body})
        url = self.policy.remediation.execution.webhook_url
        if url and loop.details.get("handoff_posted") != attempt.job_name:
            self.webhook(url, body, attempt.job_name)
            self.store.change(loop, at=now, details={**loop.details, "handoff_posted": attempt.job_name})

    def _redirect(self, loop: LoopRow, decision: RemediationDecision, inputs: LoopInputs,
                  now: datetime) -> LoopRow | None:
        """The ladder, asked again, says something else now (a budget spent, another remedy)."""
        final = final_stage(decision)
        if final is not None:
            return self._finish(loop, final, decision.reason, now, inputs)
        return self._move(loop, Stage.DRAINING, f"next: {decision.action}: {decision.reason}", now,
                          remedy=decision.remedy, via=str(decision.action))

    def _ladder(self, loop: LoopRow, inputs: LoopInputs, now: datetime, what: str) -> LoopRow | None:
        """After a failed attempt or validation: the ladder's next step, with this attempt counted."""
        decision = self._decide(loop, inputs, now)
        final = final_stage(decision)
        if final is not None:
            return self._finish(loop, final, f"{what}; {decision.reason}", now, inputs)
        return self._move(loop, Stage.DRAINING, f"{what}; next: {decision.action}: {decision.reason}", now,
                          remedy=decision.remedy, via=str(decision.action), attempt=loop.attempt + 1)

    # --- validating -------------------------------------------------------------------------------

    def _to_validation(self, loop: LoopRow, attempt: AttemptRow, now: datetime) -> LoopRow | None:
        if not self.policy.remediation.validation.enabled:
            return self._move(loop, Stage.RETURNING, f"{attempt.reason}; validation is off", now)
        return self._move(loop, Stage.VALIDATING, attempt.reason, now, validation=loop.validation + 1)

    def _validating(self, loop: LoopRow, node: NodeState, now: datetime) -> LoopRow | None:
        inputs = self._inputs(loop)
        seq = loop.validation
        name = job_name(loop.loop_id, "validation", seq)
        check = self.store.attempt(loop.loop_id, "validation", seq)
        if check is None:
            reserved = self.store.change(loop, at=now, reserve=Reservation("validation", seq, "job", name))
            if reserved is None:
                return None
            loop = reserved
            check = self.store.attempt(loop.loop_id, "validation", seq)
            assert check is not None
        job = self.cluster.job_state(name)
        if job.phase == "missing" and check.outcome == "in_flight":
            refused = self._create(loop, "validation", seq, inputs)
            if refused is not None:
                job = JobState(name, "failed", reason=refused)
        remedy = self.store.attempt(loop.loop_id, loop.remedy or "", loop.attempt)
        since = remedy.reserved_at if remedy is not None else loop.stage_since
        with Session(self.store.engine) as s:
            fault = new_fault_since(s, loop.node, loop.gpu, since)
        out, diag = validation_outcome(job, fault, check.reserved_at, now, self.policy.remediation)
        if out.result == "wait":
            return self._note(loop, out.reason, now)
        summary = {"passed": out.result == "succeeded", "summary": diag.summary if diag else out.reason,
                   "findings": list(diag.findings) if diag else [], "version": diag.version if diag else None,
                   "job": name, "level": self.policy.remediation.validation.level,
                   "output": job.message[:OUTPUT_MAX]}
        self.store.finish(loop.loop_id, "validation", seq, out.result, out.reason, at=now, details=summary)
        verdict = "passed" if out.result == "succeeded" else "failed"
        self.store.validated(loop.loop_id, loop.remedy or "", loop.attempt, verdict)
        details = {**loop.details, "validation": summary}
        if out.result == "succeeded":
            return self._move(loop, Stage.RETURNING, out.reason, now, details=details)
        noted = self.store.change(loop, at=now, details=details)
        if noted is None:
            return None
        return self._ladder(noted, inputs, now, out.reason)

    # --- returning and the final stages -----------------------------------------------------------

    def _returning(self, loop: LoopRow, node: NodeState, now: datetime) -> LoopRow | None:
        by = "xidpipe-remediation"
        why = f"validation passed after {loop.remedy}: returned to service by remediation loop {loop.loop_id}"
        if node.exists and node.cordoned_for == loop.incident_id:
            result = self.executor.release(loop.node, by=by, reason=why, incident_id=loop.incident_id,
                                           condition_reason="ReturnedToService")
            if result.outcome != "done":
                raise TemporaryError(f"release of {loop.node}: {result.outcome}: {result.reason}")
        run_return_hooks(Returned(node=loop.node, incident_id=loop.incident_id, gpu=loop.gpu, by=by, reason=why))
        # Before the final stage, each once (a pass after a crash here does them again and changes nothing).
        record_lifecycle_step(self.store.engine, loop.incident_id, "repaired", why, at=now)
        record_ledger_event(self.store.engine, loop, "repaired", why, now)
        moved = self._move(loop, Stage.RETURNED, why, now)
        if moved is not None:
            self._repair_time(loop, now)
        return moved

    def _finish(self, loop: LoopRow, stage: Stage, reason: str, now: datetime,
                inputs: LoopInputs | None = None) -> LoopRow | None:
        """A final stage other than the return: RMA (the card marked in the ledger) or people; the node stays
        cordoned."""
        if stage == Stage.RMA:  # before the final stage, each once (see _returning)
            pci = (inputs.pci if inputs else "") or str(loop.details.get("pci") or "")
            self.store.open_rma(loop, pci, reason, now)
            record_lifecycle_step(self.store.engine, loop.incident_id, "rma", reason, at=now)
            record_ledger_event(self.store.engine, loop, "rma", reason, now)
        return self._move(loop, stage, reason, now)

    def _repair_time(self, loop: LoopRow, now: datetime) -> None:
        metrics = getattr(self, "metrics", None)
        if metrics is None:
            return
        try:
            first = self._inputs(loop).first_seen
        except ActionError:
            return
        metrics.remediation_mttr.observe(max(0.0, (now - first).total_seconds()))

    def _bug_summary(self, job: JobState) -> dict[str, Any]:
        report = bug_report_of(job.message)
        if report is None:
            return {"job": job.name, "phase": job.phase, "reason": job.reason}
        return {"job": job.name, "path": report.path, "bytes": report.bytes, "sha256": report.sha256}


def _rebooted(attempt: AttemptRow, node: NodeState) -> bool:
    """A reboot whose Job is gone because the node came back (nothing to create again)."""
    before = str(attempt.details.get("boot_id_before") or "")
    return attempt.kind == "reboot_node" and bool(before) and node.boot_id != before


def _job_details(job: JobState | None) -> dict[str, Any] | None:
    if job is None:
        return None
    return {"name": job.name, "phase": job.phase, "reason": job.reason}
