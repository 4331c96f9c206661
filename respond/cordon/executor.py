"""The cordon executor: read, decide (pure, `models.cordon`), act through a plan of steps, record.

Input: a `models.cordon.CordonRequest` per incident (what the stream emits). Output: an
`ActionResult` with the decision, what changed, the records of the steps that have their own, and
whether a failure may succeed on redelivery (`retryable`). Every call writes one action record for
the decision with its outcome, and one per step with a record of its own.

A decision that acts on the node (a fresh cordon, a repeat, or a redelivery that finds the node
cordoned for its incident: `respond.cordon.steps.base.trigger_of`) runs the plan the step registry
gives for it (`respond.cordon.steps.plan`): the step that writes the decision (the cordon, the
repeat) under the lock, then the others in order (the condition, the Event, the drain, ...). The
executor names no step: each brings its port, its idempotency key and its record.

Safe under at-least-once delivery: each step checks the node's current state or its idempotency key
first, so a redelivered request changes nothing (no second taint, annotation change or Event).

Fencing: when the node adapter's fence refuses a write (`respond.errors.Fenced`: this replica no
longer holds the Lease it last renewed), nothing was sent, the plan ends there, and the decision's
record says `fenced` (retryable: the cordon lane keeps it pending in SQL for the leader).

The breaker: the fleet view (the pool's size and xidpipe's cordons in it, from the cluster; the
last hour's cordons, from the action record) and the breaker state are read, the cordon is written
and recorded under the action record's `exclusive()` lock (across processes on PostgreSQL), so
neither the threads of one responder nor two responders acting at once overshoot the limits. The
pool's counts are taken fresh as of the newest cordon in the action record (its node's
resourceVersion, recorded with it), whichever responder made it. A redelivered cordon of a node
that this incident already holds is recorded as `done` only when no `done` record of it exists (its
first responder died between the patch and the record), so each cordon counts once.

The lock is held for as little as the counts need: the node is read before it (the cordon's write
is guarded by that read's resourceVersion, so a node changed meanwhile is read again under the
lock), and the steps after the decision (the `GPUHealthy` condition, the Event, the drain) follow
after it; a crash before them is completed by the redelivery (the node is then already cordoned
for this incident: the `resume` plan).

The cluster is reached through narrow ports (`port`, and each step's own), all of which
`kube_nodes.KubeNodes` implements on the Kubernetes API, whose client is synchronous: use
`handle_async` from asyncio code.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from models.cordon import (
    BreakerState,
    CordonDecision,
    CordonRequest,
    FleetView,
    NodeView,
    ReleaseDecision,
    decide_cordon,
    decide_release,
    matching_rule,
    policy_verdict,
)
from models.cordon_policy import CordonPolicy
from models.quarantine import GpuView
from respond.cordon.action_log import ActionOutcome, ActionRecord, ActionStore
from respond.cordon.port import Conflict, DeviceReader, NodeRead, NodeReader, PoolCounter, ReleaseWriter
from respond.cordon.steps import STEPS, Step, StepContext, StepRecord, Trigger, plan, trigger_of
from respond.cordon.steps.condition import ConditionWriter
from respond.cordon.steps.event import EventWriter
from respond.errors import ActionError, Fenced, PermanentError

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


class FleetAlert(BaseModel):
    """Raised when the breaker trips: a fault hitting many nodes is a fleet problem, not a node's."""

    model_config = ConfigDict(frozen=True)

    at: datetime
    pool: str
    reason: str
    node: str
    incident_id: str
    family: str


class ActionResult(BaseModel):
    action: str = Field(description="the decision's action kind: cordon, repeat, release")
    outcome: ActionOutcome
    node: str
    incident_id: str | None = None
    decision: str | None = None
    reason: str
    dry_run: bool = False
    changes: list[str] = Field(default_factory=list)
    retryable: bool = False
    fleet_alert: FleetAlert | None = None
    steps: list[StepRecord] = Field(
        default_factory=list, description="the records of the steps with a record of their own (the drain's, ...)")
    resource_version: str | None = Field(default=None, description="the node's (the rule's), as the cordon (the "
                                        "quarantine) left it")
    quarantine: dict[str, str] = Field(
        default_factory=dict, description="a decision about a GPU: its UUID, rule, effect and device; or why a "
        "quarantine_gpu rule cordoned the node instead (`fallback`)")

    def step(self, name: str) -> StepRecord | None:
        """The record of the step `name`, when it ran and has a record of its own."""
        return next((r for r in self.steps if r.step == name), None)


class ExecutorNodes(NodeReader, PoolCounter, ReleaseWriter, ConditionWriter, EventWriter, Protocol):
    """What the executor calls itself (reads, pool counts, the release); each step's own port is
    checked when the executor is built."""


@dataclass(slots=True)
class _After:
    """The steps of a plan that run after the lock, and what they act on."""

    ctx: StepContext
    steps: list[Step]


@dataclass(slots=True)
class Decided:
    """A request decided, its decision's write done and recorded (`CordonExecutor.decide`); the plan's
    later steps wait for `CordonExecutor.complete`."""

    req: CordonRequest
    result: ActionResult
    after: _After | None = None


class CordonExecutor:
    def __init__(
        self,
        policy: CordonPolicy,
        store: ActionStore,
        nodes: ExecutorNodes | None,
        *,
        dry_run: bool = False,
        conflict_retries: int = 8,
        clock: Callable[[], datetime] = utcnow,
        on_fleet_alert: Callable[[FleetAlert], None] | None = None,
        ports: Sequence[object] = (),
    ) -> None:
        self.policy = policy
        self.store = store
        self.nodes = nodes
        self.ports = list(ports)  # adapters of step ports beside the node adapter (the remediation intake)
        self.dry_run = dry_run or policy.dry_run or nodes is None
        self.conflict_retries = conflict_retries
        self.clock = clock
        self.on_fleet_alert = on_fleet_alert
        self._lock = threading.Lock()
        self.quarantines = any(r.quarantines for r in policy.rules)
        if nodes is not None:
            for step in STEPS:
                if step.applies(policy) and self._adapter(step) is None:
                    raise TypeError(_unported(nodes, step))

    def _pool(self, current: Any) -> str | None:
        """The node's pool (its pool label's value, '' without it) as read for the decision; None unread.
        Kept with the action's record: the history's reliability figures per pool read it there."""
        if current is None or not current.view.exists:
            return None
        return str(current.view.labels.get(self.policy.scope.pool_label, ""))

    def _adapter(self, step: Step) -> Any:
        """The adapter that implements the step's port: the node adapter, else one of `ports`."""
        return next((a for a in (self.nodes, *self.ports) if a is not None and isinstance(a, step.port)), None)

    # --- cordon -----------------------------------------------------------------------------------

    async def handle_async(self, req: CordonRequest) -> ActionResult:
        return await asyncio.to_thread(self.handle, req)

    def handle(self, req: CordonRequest) -> ActionResult:
        """Decide, write and complete the plan: `complete(decide(req))`."""
        return self.complete(self.decide(req))

    def decide(self, req: CordonRequest) -> Decided:
        """Read the node, decide and, for a decision that writes the node (the cordon's guarded patch, a
        quarantine's rule), write it and record it, under the lock. What a burst must do first: a lane
        decides every request of a burst before it completes any (`complete`), so the last node is
        unschedulable after the burst's decisions, not after their conditions, Events and drains too."""
        after: _After | None = None
        try:
            current = self.nodes.read(req.node) if self.nodes is not None else None
            with self.store.exclusive():
                result, after = self._handle(req, current)
                self._record(result, details={"changes": result.changes, "retryable": result.retryable,
                                              "resource_version": result.resource_version, **result.quarantine,
                                              "pool": self._pool(current)})
        except ActionError as exc:
            after = None
            result = self._failed(req, exc)
            self._record(result, details={"changes": result.changes, "retryable": result.retryable})
        return Decided(req, result, after)

    def complete(self, decided: Decided) -> ActionResult:
        """The plan's steps after the decision (the condition, the Event, the drain, ...); the result of
        the whole. A process that stops between `decide` and this leaves the plan to the request's
        redelivery, which finds the node cordoned for the incident and completes it."""
        req, result, after = decided.req, decided.result, decided.after
        if after is not None and after.steps:
            result = self._run_after(req, result, after)
        self._log(req, result)
        return result

    def _failed(self, req: CordonRequest, exc: ActionError, *, done: ActionResult | None = None) -> ActionResult:
        outcome = _failure(exc)
        reason = str(exc) if done is None else f"{done.reason}; then {outcome}: {exc}"
        return ActionResult(action=done.action if done else "cordon", outcome=outcome, node=req.node,
                            incident_id=req.incident_id, decision=done.decision if done else None, reason=reason,
                            retryable=exc.retryable, dry_run=self.dry_run, changes=list(done.changes) if done else [],
                            steps=list(done.steps) if done else [])

    def _log(self, req: CordonRequest, result: ActionResult) -> None:
        ctx = {"node": req.node, "incident": req.incident_id, "family": req.family, "xids": list(req.xids)}
        level = logging.WARNING if result.outcome in ("failed", "fenced", "blocked", "refused") else logging.INFO
        log.log(level, "cordon %s: %s", result.outcome, result.reason,
                extra={**ctx, "decision": result.decision, "changes": result.changes})

    def _handle(self, req: CordonRequest, current: NodeRead | None) -> tuple[ActionResult, _After | None]:
        """Decide and, for a decision that writes the node, write it: under the lock (the caller records
        the result before releasing it)."""
        if self.nodes is None or current is None:
            # No cluster: decide from the request alone and record the decision as a dry run.
            decision = decide_cordon(req, NodeView(name=req.node), FleetView(), self.store.breaker(), self.policy,
                                     dry_run=True)
            return self._result(req, decision, "dry_run" if decision.changes_node else "skipped"), None
        with self._lock:
            decision = self._decide(req, current)
            if decision.outcome == "trip_breaker":
                return self._trip(req, decision, current.view), None
            if decision.outcome == "quarantine":  # a dry run writes the rule too, with effect None
                return self._write(req, decision, current, "quarantine")
            if decision.outcome != "cordon":
                return self._after_decision(req, decision, current)
            if decision.dry_run:
                return self._result(req, decision, "dry_run"), None
            return self._write(req, decision, current, "cordon")

    def _write(self, req: CordonRequest, decision: CordonDecision, current: NodeRead,
               trigger: Trigger) -> tuple[ActionResult, _After | None]:
        """The plan's decision step (the cordon's guarded write, the repeat), its record the decision's;
        a node that changed since it was read is read and decided again. The plan's other steps follow
        after the lock."""
        nodes = self.nodes
        assert nodes is not None
        planned = plan(trigger, self.policy)
        writer = next(s for s in planned if s.phase == "decision")
        ctx = StepContext(req, decision, self.policy, current, self.clock(), trigger)
        for _ in range(self.conflict_retries):
            try:
                record = writer.run(self._port(writer), ctx)
                break
            except Conflict:
                current = nodes.read(req.node)
                decision = self._decide(req, current)
                if trigger_of(decision, current.view, req) != trigger:
                    return self._after_decision(req, decision, current)
                ctx.decision, ctx.node = decision, current
        else:
            return self._result(req, decision, "failed", retryable=True,
                                reason=f"node {req.node} kept changing: {self.conflict_retries} conflicts"), None
        # The node is written (for a cordon: cordoned and claimed; for a quarantine: the GPU's rule); the
        # record follows before the lock is released.
        outcome: ActionOutcome = "dry_run" if decision.dry_run and record.outcome == "done" else record.outcome
        result = self._result(req, decision, outcome, action=record.step, changes=record.changes,
                              resource_version=record.details.get("resource_version"), details=record.details)
        # A dry run's quarantine (effect None) is the rule alone: no condition or Event tells of it.
        return result, _After(ctx, [] if decision.dry_run else [s for s in planned if s.phase == "after"])

    def _run_after(self, req: CordonRequest, result: ActionResult, after: _After) -> ActionResult:
        """The plan's steps after the lock, in order. What a step changed joins the decision's result, or
        has a record of its own; a step's failure is recorded as the decision's and is retryable as the
        error says: the redelivery finds the node cordoned for this incident and completes the plan."""
        ctx = after.ctx
        ctx.at = self.clock()
        changes = list(result.changes)
        records: list[StepRecord] = []
        for step in after.steps:
            if step.own_record and ctx.trigger != "cordon" and self.store.step_recorded(
                    step.name, req.node, step.idempotency_key(req), ctx.cordoned_at):
                continue  # done already for this cordon (a fresh cordon has done nothing yet)
            try:
                record = step.run(self._port(step), ctx)
            except ActionError as exc:
                failed = self._failed(req, exc, done=result.model_copy(update={"changes": changes,
                                                                                "steps": records}))
                self._record(failed, details={"changes": failed.changes, "retryable": failed.retryable})
                return failed
            if step.own_record:
                self._record_step(req, record, ctx.cordoned_at)
                records.append(record)
            else:
                changes.extend(record.changes)
            if record.outcome == "failed":
                break
        return result.model_copy(update={"changes": changes, "steps": records})

    def _port(self, step: Step) -> Any:
        adapter = self._adapter(step)
        if adapter is None:
            raise PermanentError(_unported(self.nodes, step))
        return adapter

    def _decide(self, req: CordonRequest, current: NodeRead) -> CordonDecision:
        view = current.view
        wanted, _, _ = policy_verdict(self.policy, req)
        rule = matching_rule(self.policy, req)
        gpu = self._gpu(req) if wanted and view.exists and rule is not None and rule.quarantines else None
        if gpu is not None and gpu.device is not None:
            counts = gpu.rule is None or not gpu.rule.effective
        else:
            counts = not view.cordoned_by_xidpipe and not view.unschedulable
        fleet = FleetView()
        if wanted and view.exists and counts:
            assert self.nodes is not None
            since = self.clock() - timedelta(hours=1)
            fleet = self.nodes.fleet_view(
                self.policy, view.labels, self.store.cordons_since(since), self.store.last_cordon_version(),
                node=req.node, quarantines_as_of=self.store.last_quarantine_version() if self.quarantines else None)
        return decide_cordon(req, view, fleet, self.store.breaker(), self.policy, dry_run=self.dry_run, gpu=gpu)

    def _gpu(self, req: CordonRequest) -> GpuView:
        """The incident's GPU among the DRA devices, when the adapter finds devices."""
        if not isinstance(self.nodes, DeviceReader):
            return GpuView(uuid=req.gpu, unresolved="the node adapter finds no DRA devices")
        return self.nodes.gpu_view(req.node, req.gpu, self.policy)

    def _after_decision(self, req: CordonRequest, decision: CordonDecision,
                        current: NodeRead) -> tuple[ActionResult, _After | None]:
        """Outcomes other than a fresh cordon: a repeat, a redelivery (complete what a crash may have
        left undone, after the lock), or a refusal."""
        if decision.outcome == "repeat":
            if decision.dry_run:
                return self._result(req, decision, "dry_run"), None
            return self._write(req, decision, current, "repeat")
        if trigger_of(decision, current.view, req) == "quarantine_resume":
            ctx = StepContext(req, decision, self.policy, current, self.clock(), "quarantine_resume")
            planned = plan("quarantine_resume", self.policy)
            steps = [] if decision.dry_run else [s for s in planned if s.phase == "after"]
            return self._result(req, decision, "noop"), _After(ctx, steps)
        if trigger_of(decision, current.view, req) == "resume":
            if decision.dry_run:
                return self._result(req, decision, "noop"), None
            # "done" once per cordon: when its first responder died before recording it, this completes it.
            if self.store.cordon_recorded(req.node, req.incident_id):
                result = self._result(req, decision, "noop")
            else:
                result = self._result(req, decision, "done", resource_version=current.resource_version)
            ctx = StepContext(req, decision, self.policy, current, self.clock(), "resume")
            return result, _After(ctx, [s for s in plan("resume", self.policy) if s.phase == "after"])
        if decision.outcome in ("already_cordoned", "already_quarantined"):
            return self._result(req, decision, "noop"), None
        if decision.outcome == "node_missing":
            return self._result(req, decision, "failed"), None
        return self._result(req, decision, "skipped"), None

    def _trip(self, req: CordonRequest, decision: CordonDecision, view: NodeView) -> ActionResult:
        at = self.clock()
        pool = view.labels.get(self.policy.scope.pool_label, "")
        alert = FleetAlert(at=at, pool=pool, reason=decision.reason, node=req.node,
                           incident_id=req.incident_id, family=req.family)
        if decision.dry_run:
            return self._result(req, decision, "dry_run", fleet_alert=alert)
        self.store.set_breaker(BreakerState(tripped=True, tripped_at=at, reason=decision.reason, pool=pool))
        self.store.record(ActionRecord(at=at, action="breaker_trip", outcome="done", node=req.node,
                                       incident_id=req.incident_id, decision=decision.outcome,
                                       reason=decision.reason, details={"pool": pool, "family": req.family}))
        log.error("cordon circuit breaker tripped: %s", decision.reason,
                  extra={"node": req.node, "incident": req.incident_id, "pool": pool})
        if self.on_fleet_alert is not None:
            self.on_fleet_alert(alert)
        return self._result(req, decision, "blocked", fleet_alert=alert)

    def _result(self, req: CordonRequest, decision: CordonDecision, outcome: ActionOutcome, *,
                action: str | None = None, changes: list[str] | None = None, retryable: bool = False,
                reason: str | None = None, fleet_alert: FleetAlert | None = None,
                resource_version: str | None = None, details: dict[str, Any] | None = None) -> ActionResult:
        """The result of a decision: its action kind is `quarantine` for a decision about a GPU."""
        quarantine = {k: v for k, v in {"gpu": decision.gpu, "rule": decision.rule_name, "effect": decision.effect,
                                        "device": decision.device.text if decision.device else None,
                                        "fallback": decision.fallback}.items() if v}
        return ActionResult(action=action or ("quarantine" if decision.scope == "gpu" else "cordon"), outcome=outcome,
                            node=req.node, incident_id=req.incident_id, decision=decision.outcome,
                            reason=reason or decision.reason, dry_run=decision.dry_run, changes=changes or [],
                            retryable=retryable, fleet_alert=fleet_alert, resource_version=resource_version,
                            quarantine={**quarantine, **{k: v for k, v in (details or {}).items()
                                                         if k in ("rule", "effect", "device", "gpu")}})

    def _record(self, result: ActionResult, details: dict[str, Any], actor: str = "xidpipe") -> None:
        self.store.record(ActionRecord(
            action=result.action, outcome=result.outcome, node=result.node, incident_id=result.incident_id,
            decision=result.decision, reason=result.reason, dry_run=result.dry_run, actor=actor,
            details={k: v for k, v in details.items() if v not in (None, [], {})},
        ))

    def _record_step(self, req: CordonRequest, record: StepRecord, cordoned_at: str) -> None:
        """A step's record of its own: its outcome and reason, its details, its key and the cordon it follows."""
        self.store.record(ActionRecord(action=record.step, outcome=record.outcome, node=req.node,
                                       incident_id=req.incident_id, reason=record.reason,
                                       details={**record.details, "key": record.key, "cordoned_at": cordoned_at}))

    # --- release ----------------------------------------------------------------------------------

    def release(self, node: str, *, by: str, reason: str, incident_id: str | None = None,
                condition_reason: str = "ReleasedByOperator") -> ActionResult:
        """Lift xidpipe's cordon of `node` (only its own; for `incident_id` when given), recorded with who
        and why; the GPUHealthy condition turns True with `condition_reason`."""
        try:
            result = self._release(node, by=by, reason=reason, incident_id=incident_id,
                                   condition_reason=condition_reason)
        except ActionError as exc:
            result = ActionResult(action="release", outcome=_failure(exc), node=node, incident_id=incident_id,
                                  reason=str(exc), retryable=exc.retryable)
        log.info("release %s: %s", result.outcome, result.reason, extra={"node": node, "by": by})
        self._record(result, details={"changes": result.changes, "operator_reason": reason}, actor=by)
        return result

    def _release(self, node: str, *, by: str, reason: str, incident_id: str | None,
                 condition_reason: str) -> ActionResult:
        if self.nodes is None:
            return ActionResult(action="release", outcome="dry_run", node=node, incident_id=incident_id,
                                reason="no cluster configured: nothing released", dry_run=True)
        nodes = self.nodes
        for _ in range(self.conflict_retries):
            current = nodes.read(node)
            decision = decide_release(current.view, incident_id)
            if decision.outcome != "release":
                return _release_result(node, incident_id, decision, "refused")
            released = current.view.xidpipe_incident
            if self.dry_run:
                return _release_result(node, released, decision, "dry_run", dry_run=True)
            at = self.clock()
            try:
                changes = nodes.apply_release(current, by=by, reason=reason, at=at)
                break
            except Conflict:
                continue
        else:
            return ActionResult(action="release", outcome="failed", node=node, incident_id=incident_id,
                                reason=f"node {node} kept changing: {self.conflict_retries} conflicts", retryable=True)
        after = nodes.read(node)
        if nodes.set_condition(node, "True", condition_reason, f"xidpipe cordon for incident {released} "
                               f"released by {by}: {reason}"[:1024], at, after.condition):
            changes.append("condition")
        nodes.emit_event(node, key=f"{released}\x1f{at.isoformat()}", kind="release", action="Uncordon",
                         reason=condition_reason, note=f"xidpipe cordon for incident {released} released by "
                         f"{by}: {reason}", at=at, event_type="Normal")
        changes.append("event")
        return ActionResult(action="release", outcome="done", node=node, incident_id=released,
                            decision=decision.outcome, reason=f"{decision.reason}; released by {by}: {reason}",
                            changes=changes)

    # --- breaker ----------------------------------------------------------------------------------

    def breaker_status(self) -> BreakerState:
        return self.store.breaker()

    def reset_breaker(self, *, by: str, reason: str) -> BreakerState:
        before = self.store.breaker()
        state = BreakerState(tripped=False, reset_at=self.clock(), reset_by=by, reset_reason=reason)
        self.store.set_breaker(state)
        self.store.record(ActionRecord(
            action="breaker_reset", outcome="done" if before.tripped else "noop", actor=by,
            reason=f"reset by {by}: {reason}" + ("" if before.tripped else " (it was not tripped)"),
            details={"was": before.model_dump(mode="json")},
        ))
        log.warning("cordon circuit breaker reset", extra={"by": by, "reason": reason, "was_tripped": before.tripped})
        return state


def _failure(exc: ActionError) -> ActionOutcome:
    """A failure's outcome: `fenced` when the node adapter's fence refused a write (nothing was sent)."""
    return "fenced" if isinstance(exc, Fenced) else "failed"


def _unported(nodes: object, step: Step) -> str:
    return (f"the node adapter {type(nodes).__name__} does not implement {step.port.__name__}, "
            f"the port of step {step.name!r}")


def _release_result(node: str, incident_id: str | None, decision: ReleaseDecision, outcome: ActionOutcome,
                    dry_run: bool = False) -> ActionResult:
    return ActionResult(action="release", outcome=outcome, node=node, incident_id=incident_id,
                        decision=decision.outcome, reason=decision.reason, dry_run=dry_run)
