"""The remediator: advances every open remediation loop, one pass at a time (`tick`), as the leader
responder's background task.

Each pass reads a loop's node, asks the pure stage functions (`models.remediation_loop`) and the
ladder (`models.remediation.decide_remediation`) what comes next, and writes the loop's new stage
(a compare-and-set on its version, with its transition) before the effect that stage leads to:

- queued: the ladder's decision; RMA or people at once, else a slot under the in-flight cap
  (admitted under the action record's lock, across responders);
- evidence: the node's capture stored, the cluster's evidence captured into the loop, the
  `nvidia-bug-report.sh` Job done where configured; nothing is reset before;
- draining: evictions through the Eviction API, disruption budgets honoured, until the deadline;
- executing, validating, returning: `respond.remediation.execution`.

Every effect is idempotent by name (the Jobs are named after their attempt, reserved in SQL before
they are created; evictions of a pod gone say so; the release is guarded), and every stage is asked
again from the cluster's current state after a restart: a responder killed at any point neither
repeats nor loses an effect. An operator's uncordon or `xidpipe node release` cancels the loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from history.remediation_inputs import LoopInputs, loop_inputs, node_capture_stored
from history.remediation_store import LoopRow, RemediationStore, Reservation
from models.cordon_policy import CordonPolicy
from models.reliability import mean_time_between, mean_time_to_repair
from models.remediation import RemediationDecision, admission, decide_remediation
from models.remediation_jobs import ANN_STAGE, CONDITION_TYPE, JobParams, job_manifest, job_name
from models.remediation_loop import NodeState, cancelled, drain_outcome, evidence_outcome, final_stage
from models.vocabulary import FINAL_STAGES, RemediationStage
from respond.cordon.executor import CordonExecutor
from respond.cordon.steps.drain import GPU_RESOURCE, PodInfo, skip_reason
from respond.errors import ActionError, TemporaryError
from respond.remediation.execution import Execution
from respond.remediation.intake import decision_details, history_since
from respond.remediation.port import LoopCluster
from respond.remediation.webhook import post_handoff
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)
Stage = RemediationStage
ACTOR = "xidpipe-remediation"
STEPS_PER_PASS = 8  # stages one loop may pass through in one pass (each re-reads the node)
SNAPSHOT_FROM = 20  # from this many loops on, a pass lists the nodes once instead of reading each
RELIABILITY_EVERY_S = 300.0  # MTTR and MTBI per node and card are read from the history this often
RELIABILITY_DAYS = 90
REASONS: dict[str, str] = {
    "queued": "Queued", "evidence": "CollectingEvidence", "draining": "Draining", "executing": "Remediating",
    "validating": "Validating", "returning": "Returning", "returned": "ReturnedToService", "rma": "RMA",
    "manual": "NeedsPeople", "cancelled": "Cancelled", "dry_run": "DryRun"}


def utcnow() -> datetime:
    return datetime.now(UTC)


class Remediator(Execution):
    """Advances the loops in `store` on the cluster through `cluster`; returns nodes through `executor`."""

    def __init__(self, store: RemediationStore, cluster: LoopCluster, executor: CordonExecutor, *,
                 service_account: str = "xidpipe-remediation", clock: Callable[[], datetime] = utcnow,
                 metrics: ResponderMetrics | None = None,
                 webhook: Callable[[str, str, str], int] = post_handoff, steps_per_pass: int = STEPS_PER_PASS) -> None:
        self.store = store
        self.steps_per_pass = steps_per_pass  # 1: one transition per pass (a crash can land between any two)
        self.cluster = cluster
        self.executor = executor
        self.service_account = service_account
        self.clock = clock
        self.metrics = metrics
        self.webhook = webhook
        self._pools: dict[str, int] = {}  # pool sizes, listed once per pass
        self._full: set[str] = set()  # pools without a slot this pass ('' : the cluster's cap is reached)
        self._reliability_at: datetime | None = None

    @property
    def policy(self) -> CordonPolicy:
        return self.executor.policy

    # --- passes -----------------------------------------------------------------------------------

    def tick(self) -> int:
        """One pass over every loop that is neither final nor paused; how many transitions it made."""
        made = 0
        self._pools, self._full = {}, set()
        due = self.store.due()
        snapshot = self.cluster.node_states() if len(due) >= SNAPSHOT_FROM else {}
        for loop in due:
            try:
                made += self.advance(loop, snapshot.get(loop.node) if snapshot else None)
            except ActionError as exc:  # the cluster refused or is unreachable: the next pass tries again
                log.warning("remediation loop %s: %s", loop.loop_id, exc, extra=self._ctx(loop))
            except Exception:
                log.exception("remediation loop %s: pass failed", loop.loop_id, extra=self._ctx(loop))
        self.gauges()
        return made

    def advance(self, loop: LoopRow, node: NodeState | None = None) -> int:
        """Take `loop` as far as it goes now (`node`: its node as a pass read it, for the first step); how
        many changes were written."""
        made = 0
        current = loop
        while not current.final and not current.paused and made < self.steps_per_pass:
            nxt = self._step(current, node if made == 0 else None)
            if nxt is None:
                break
            made += 1
            if nxt.stage == current.stage:
                break  # it only noted where it stands: the next pass looks again
            current = nxt
        return made

    def _step(self, loop: LoopRow, node: NodeState | None = None) -> LoopRow | None:
        now = self.clock()
        if node is None:
            node, _ = self.cluster.node_state(loop.node)
        if loop.stage != Stage.RETURNING:
            why = cancelled(node, loop.incident_id, loop.cancel_requested)
            if why is not None:
                return self._cancel(loop, why, now)
        handler = {Stage.QUEUED: self._queued, Stage.EVIDENCE: self._evidence, Stage.DRAINING: self._draining,
                   Stage.EXECUTING: self._executing, Stage.VALIDATING: self._validating,
                   Stage.RETURNING: self._returning}[Stage(loop.stage)]
        return handler(loop, node, now)

    # --- reading and writing ----------------------------------------------------------------------

    def _ctx(self, loop: LoopRow) -> dict[str, Any]:
        return {"node": loop.node, "incident": loop.incident_id, "loop": loop.loop_id, "stage": loop.stage}

    def _inputs(self, loop: LoopRow) -> LoopInputs:
        with Session(self.store.engine) as s:
            found = loop_inputs(s, loop.incident_id, self.policy.longest_window_s())
        if found is None:
            raise TemporaryError(f"incident {loop.incident_id} is not in the database")
        return found

    def _decide(self, loop: LoopRow, inputs: LoopInputs, now: datetime) -> RemediationDecision:
        rp = self.policy.remediation
        history = self.store.history(loop.node, inputs.card, history_since(rp, now))
        return decide_remediation(inputs.subject, history, rp, now, loop_id=loop.loop_id)

    def _move(self, loop: LoopRow, stage: Stage, reason: str, now: datetime, **updates: Any) -> LoopRow | None:
        """Write the loop's new stage (None when another writer moved it first) and show it on the node: a
        final stage is shown first (no pass comes after it to show it again after a crash), another after."""
        final = stage in FINAL_STAGES
        if final:
            self._show(replace(loop, stage=str(stage), reason=reason), now)
        changed = self.store.change(loop, stage=str(stage), reason=reason, at=now, **updates)
        if changed is None:
            return None
        log.info("remediation loop %s: %s → %s: %s", loop.loop_id, loop.stage, stage, reason, extra=self._ctx(changed))
        if self.metrics is not None:
            self.metrics.remediation_transitions.labels(str(stage)).inc()
            if final:
                self.metrics.remediation_outcomes.labels(str(stage)).inc()
        if not final:
            self._show(changed, now)
        return changed

    def _note(self, loop: LoopRow, reason: str, now: datetime,
              details: dict[str, Any] | None = None) -> LoopRow | None:
        """Record where the loop stands without a new stage, when that changed (a pass that only waits
        writes nothing)."""
        if reason == loop.reason and (details is None or details == loop.details):
            return None
        if details is None:
            return self.store.change(loop, reason=reason, at=now)
        return self.store.change(loop, reason=reason, at=now, details=details)

    def _show(self, loop: LoopRow, now: datetime) -> None:
        """The loop's stage on the node: the GPURemediation condition and an annotation (kubectl shows both)."""
        status = "False" if loop.final else "True"
        reason = REASONS.get(loop.stage, "Remediating")
        if loop.stage == Stage.EXECUTING and loop.remedy:
            reason = "ResettingGPU" if loop.remedy == "reset_gpu" else "RebootingNode"
        try:
            self.cluster.set_node_condition(loop.node, CONDITION_TYPE, status, reason,
                                            f"xidpipe remediation {loop.loop_id} ({loop.incident_id}): {loop.reason}",
                                            now)
            self.cluster.annotate(loop.node, {ANN_STAGE: f"{loop.stage} {loop.loop_id}"})
        except ActionError as exc:  # shown at the next transition; the loop does not wait for it
            log.warning("remediation loop %s: cannot show its stage on the node: %s", loop.loop_id, exc,
                        extra=self._ctx(loop))

    def _job(self, loop: LoopRow, kind: Any, seq: int, inputs: LoopInputs) -> str:
        """Create the loop's Job of `kind` for attempt `seq` (once: a Job of that name is the same one)."""
        name = job_name(loop.loop_id, kind, seq)
        rp = self.policy.remediation
        template = getattr(rp.jobs, kind)
        deadline = {"reset_gpu": rp.execution.reset_deadline_s, "reboot_node": rp.execution.reboot_deadline_s,
                    "validation": rp.validation.deadline_s, "bug_report": rp.evidence.wait_s}[kind]
        params = JobParams(node=loop.node, gpu=inputs.gpu_uuid or "", pci=inputs.pci, key=name,
                           level=rp.validation.level)
        manifest = job_manifest(kind, template, params, namespace=self.cluster.namespace,
                                service_account=self.service_account, loop=loop.loop_id,
                                incident_id=loop.incident_id, deadline_s=deadline, ttl_s=rp.jobs.ttl_after_finished_s)
        created = self.cluster.create_job(manifest)
        log.info("remediation loop %s: Job %s %s", loop.loop_id, name, created, extra=self._ctx(loop))
        return name

    # --- the stages before the remedy -------------------------------------------------------------

    def _queued(self, loop: LoopRow, node: NodeState, now: datetime) -> LoopRow | None:
        planned = str((loop.details.get("decision") or {}).get("action") or "")
        if planned not in ("rma", "none") and ("" in self._full or loop.pool in self._full):
            return None  # no slot this pass: asked again at the next
        inputs = self._inputs(loop)
        decision = self._decide(loop, inputs, now)
        final = final_stage(decision)
        if final is not None:
            return self._finish(loop, final, decision.reason, now, inputs)
        with self.executor.store.exclusive():  # the cap is counted and taken under one lock, across responders
            if loop.pool not in self._pools:
                self._pools[loop.pool] = self.cluster.pool_size(self.policy.scope.pool_label, loop.pool)
            pool_nodes = self._pools[loop.pool]
            ok, why = admission(self.store.in_flight(), self.store.in_flight(loop.pool), loop.pool, pool_nodes,
                                self.policy)
            if not ok:
                self._full.add("" if self.store.in_flight() >= self.policy.remediation.budgets.max_in_flight
                               else loop.pool)
                return self._note(loop, f"queued: {why}", now)
            return self._move(loop, Stage.EVIDENCE, f"{why}; next: {decision.action}: {decision.reason}", now,
                              remedy=decision.remedy, via=str(decision.action), attempt=1,
                              details={**loop.details, "decision": decision_details(decision)})

    def _evidence(self, loop: LoopRow, node: NodeState, now: datetime) -> LoopRow | None:
        rp = self.policy.remediation
        inputs = self._inputs(loop)
        details = dict(loop.details)
        if "cluster_evidence" not in details:
            details["cluster_evidence"] = self.cluster.cluster_evidence(loop.node, inputs.request.pods)
            stored = self.store.change(loop, at=now, details=details)
            if stored is None:
                return None
            loop = stored
        bug = None
        if rp.evidence.bug_report:
            attempt = self.store.attempt(loop.loop_id, "bug_report", 1)
            if attempt is None:
                reserved = self.store.change(loop, at=now, reserve=Reservation(
                    "bug_report", 1, "job", job_name(loop.loop_id, "bug_report", 1)))
                if reserved is None:
                    return None
                loop = reserved
            bug = self.cluster.job_state(job_name(loop.loop_id, "bug_report", 1))
            if bug.phase == "missing":
                self._job(loop, "bug_report", 1, inputs)
        with Session(self.store.engine) as s:
            captured = node_capture_stored(s, loop.incident_id)
        out = evidence_outcome(captured, "cluster_evidence" in loop.details, bug, loop.stage_since, now, rp)
        if out.result == "wait":
            return self._note(loop, out.reason, now)
        if bug is not None:
            self.store.finish(loop.loop_id, "bug_report", 1, "succeeded" if out.result == "succeeded" else "failed",
                              out.reason, at=now, details={"message": bug.message[:4096], "reason": bug.reason})
            details = {**loop.details, "bug_report": self._bug_summary(bug)}
        else:
            details = loop.details
        if out.result == "failed":
            return self._move(loop, Stage.MANUAL, out.reason, now, details=details)
        return self._move(loop, Stage.DRAINING, out.reason, now, details=details)

    def _draining(self, loop: LoopRow, node: NodeState, now: datetime) -> LoopRow | None:
        rp = self.policy.remediation
        mode = rp.drain.reset_gpu if loop.remedy == "reset_gpu" else rp.drain.reboot_node
        if mode == "none":
            return self._move(loop, Stage.EXECUTING, "no drain before this step (policy)", now)
        report = self._drain_pass(loop, mode)
        verdict, why = drain_outcome(report["remaining"], report["blocked"], report["failed"], loop.stage_since, now,
                                     rp)
        before = loop.details.get("drain") or {}
        for kept in ("evicted", "gone"):  # what earlier passes did stays in the report
            report[kept] = list(dict.fromkeys([*before.get(kept, []), *report[kept]]))
        details = {**loop.details, "drain": report}
        if verdict in ("done", "proceed"):
            return self._move(loop, Stage.EXECUTING, f"drained ({mode}): {why}", now, details=details)
        return self._note(loop, why, now, details=details)

    def _drain_pass(self, loop: LoopRow, mode: str) -> dict[str, Any]:
        """One pass of evictions: each pod still there is evicted (a budget's refusal retried next pass)."""
        report: dict[str, Any] = {"mode": mode, "evicted": [], "gone": [], "skipped": {}, "blocked": {}, "failed": {},
                                  "remaining": 0}
        pods = self._incident_pods(loop) if mode == "gpu" else self.cluster.node_pods(loop.node)
        for pod in pods:
            why = skip_reason(pod, loop.node)
            if why == "already terminating":
                report["remaining"] += 1
                continue
            if why is not None:
                report["skipped"][pod.key] = why
                continue
            report["remaining"] += 1
            try:
                gone = not self.cluster.evict(pod, self.policy.remediation.drain.grace_period_s)
                report["gone" if gone else "evicted"].append(pod.key)
            except TemporaryError as exc:  # 429: a disruption budget allows no disruption now
                report["blocked"][pod.key] = exc.message
            except ActionError as exc:
                report["failed"][pod.key] = exc.message
        return report

    def _incident_pods(self, loop: LoopRow) -> list[PodInfo]:
        """The pods on the faulty GPU: those the incident names, else the node's pods that request GPUs."""
        named = self._inputs(loop).request.pods
        if not named:
            return [p for p in self.cluster.node_pods(loop.node) if GPU_RESOURCE in p.resources]
        return [p for ref in named if (p := self.cluster.read_pod(ref.namespace, ref.name)) is not None]

    # --- the end ----------------------------------------------------------------------------------

    def _cancel(self, loop: LoopRow, why: str, now: datetime) -> LoopRow | None:
        """Stop the loop: its Jobs still running are deleted, its attempts in flight are cancelled."""
        for attempt in self.store.attempts(loop.loop_id):
            if attempt.outcome == "in_flight":
                if attempt.via == "job":
                    with contextlib.suppress(ActionError):
                        self.cluster.delete_job(attempt.job_name)
                self.store.finish(loop.loop_id, attempt.kind, attempt.seq, "cancelled", why, at=now)
        return self._move(loop, Stage.CANCELLED, why, now)

    def gauges(self) -> None:
        if self.metrics is None:
            return
        counts = self.store.stage_counts()
        for stage in (Stage.QUEUED, Stage.EVIDENCE, Stage.DRAINING, Stage.EXECUTING, Stage.VALIDATING,
                      Stage.RETURNING):
            self.metrics.remediation_loops.labels(str(stage)).set(counts.get(str(stage), 0))
        now = self.clock()
        overdue = sum(1 for lp in self.store.loops(active=True, limit=10_000) if now > lp.deadline_at)
        self.metrics.remediation_overdue.set(overdue)
        if self._reliability_at is None or (now - self._reliability_at).total_seconds() >= RELIABILITY_EVERY_S:
            self._reliability_at = now
            self.reliability(now)

    def reliability(self, now: datetime) -> None:
        """MTTR and MTBI per node and per card over the last `RELIABILITY_DAYS` (gauges, replaced whole)."""
        assert self.metrics is not None
        since = now - timedelta(days=RELIABILITY_DAYS)
        repairs = self.store.repairs(since)
        node_starts, card_starts = self.store.incident_starts(since)
        m = self.metrics
        for gauge, values, label in (
                (m.node_mttr, mean_time_to_repair((n, f, r) for n, _, f, r in repairs), "node"),
                (m.card_mttr, mean_time_to_repair((c, f, r) for _, c, f, r in repairs), "card"),
                (m.node_mtbi, mean_time_between(node_starts), "node"), (m.card_mtbi, mean_time_between(card_starts),
                                                                        "card")):
            gauge.clear()
            for key, seconds in values.items():
                gauge.labels(**{label: key}).set(seconds)
