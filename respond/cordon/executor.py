"""The cordon executor: read, decide (pure, `models.cordon`), act, record.

Input: a `models.cordon.CordonRequest` per incident (what the stream emits). Output: an
`ActionResult` with the decision, what changed, and whether a failure may succeed on redelivery
(`retryable`). Every call writes one action record with its outcome.

Safe under at-least-once delivery: each step checks the node's current state first, so a
redelivered request changes nothing (no second taint, annotation change or Event).

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
lock), and the `GPUHealthy` condition, the Event and the drain follow after it; a crash before them
is completed by the redelivery (the node is then already cordoned for this incident).

The cluster is reached through `port.NodePort` (`kube_nodes.KubeNodes` on the Kubernetes API), whose
client is synchronous: use `handle_async` from asyncio code.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from models.cordon import (
    BreakerState,
    CordonDecision,
    CordonRequest,
    FleetView,
    NodeView,
    ReleaseDecision,
    condition_message,
    condition_reason,
    decide_cordon,
    decide_release,
    policy_verdict,
)
from models.cordon_policy import CordonPolicy
from respond.cordon.action_log import ActionKind, ActionOutcome, ActionRecord, ActionStore
from respond.cordon.drain import DrainReport, drain_gpu_pods
from respond.cordon.port import Conflict, NodeCondition, NodePort, NodeRead
from respond.errors import ActionError

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
    action: ActionKind
    outcome: ActionOutcome
    node: str
    incident_id: str | None = None
    decision: str | None = None
    reason: str
    dry_run: bool = False
    changes: list[str] = Field(default_factory=list)
    retryable: bool = False
    fleet_alert: FleetAlert | None = None
    drain: DrainReport | None = None
    resource_version: str | None = Field(default=None, description="the node's, as the cordon left it")


@dataclass(frozen=True, slots=True)
class _FollowUp:
    """What a cordon (or the completion of one) does after the lock: the condition, the Event, and
    for a fresh cordon the drain."""

    decision: CordonDecision
    condition: NodeCondition | None
    drain: bool


class CordonExecutor:
    def __init__(
        self,
        policy: CordonPolicy,
        store: ActionStore,
        nodes: NodePort | None,
        *,
        dry_run: bool = False,
        conflict_retries: int = 8,
        clock: Callable[[], datetime] = utcnow,
        on_fleet_alert: Callable[[FleetAlert], None] | None = None,
    ) -> None:
        self.policy = policy
        self.store = store
        self.nodes = nodes
        self.dry_run = dry_run or policy.dry_run or nodes is None
        self.conflict_retries = conflict_retries
        self.clock = clock
        self.on_fleet_alert = on_fleet_alert
        self._lock = threading.Lock()

    # --- cordon -----------------------------------------------------------------------------------

    async def handle_async(self, req: CordonRequest) -> ActionResult:
        return await asyncio.to_thread(self.handle, req)

    def handle(self, req: CordonRequest) -> ActionResult:
        follow: _FollowUp | None = None
        try:
            current = self.nodes.read(req.node) if self.nodes is not None else None
            with self.store.exclusive():
                result, follow = self._handle(req, current)
                self._record(result, details={"changes": result.changes, "retryable": result.retryable,
                                              "resource_version": result.resource_version})
        except ActionError as exc:
            result = self._failed(req, exc)
            self._record(result, details={"changes": result.changes, "retryable": result.retryable})
        if follow is not None:
            result = self._follow_up(req, result, follow)
        self._log(req, result)
        return result

    def _failed(self, req: CordonRequest, exc: ActionError, *, done: ActionResult | None = None) -> ActionResult:
        reason = str(exc) if done is None else f"{done.reason}; then failed: {exc}"
        return ActionResult(action="cordon", outcome="failed", node=req.node, incident_id=req.incident_id,
                            decision=done.decision if done else None, reason=reason, retryable=exc.retryable,
                            dry_run=self.dry_run, changes=list(done.changes) if done else [])

    def _log(self, req: CordonRequest, result: ActionResult) -> None:
        ctx = {"node": req.node, "incident": req.incident_id, "family": req.family, "xids": list(req.xids)}
        level = logging.WARNING if result.outcome in ("failed", "blocked", "refused") else logging.INFO
        log.log(level, "cordon %s: %s", result.outcome, result.reason,
                extra={**ctx, "decision": result.decision, "changes": result.changes})

    def _handle(self, req: CordonRequest, current: NodeRead | None) -> tuple[ActionResult, _FollowUp | None]:
        """Decide and, for a cordon, write it: under the lock (the caller records the result before
        releasing it)."""
        if self.nodes is None or current is None:
            # No cluster: decide from the request alone and record the decision as a dry run.
            decision = decide_cordon(req, NodeView(name=req.node), FleetView(), self.store.breaker(), self.policy,
                                     dry_run=True)
            return self._result(req, decision, "dry_run" if decision.changes_node else "skipped"), None
        nodes = self.nodes
        with self._lock:
            decision = self._decide(req, current)
            if decision.outcome == "trip_breaker":
                return self._trip(req, decision, current.view), None
            if decision.outcome != "cordon":
                return self._after_decision(req, decision, current)
            if decision.dry_run:
                return self._result(req, decision, "dry_run"), None
            at = self.clock()
            for _ in range(self.conflict_retries):
                try:
                    changes, cordoned = nodes.apply_cordon(current, req, decision, at)
                    break
                except Conflict:
                    current = nodes.read(req.node)
                    decision = self._decide(req, current)
                    if decision.outcome != "cordon":
                        return self._after_decision(req, decision, current)
            else:
                return self._result(req, decision, "failed", retryable=True,
                                    reason=f"node {req.node} kept changing: {self.conflict_retries} conflicts"), None
        # The node is cordoned and claimed; the record follows before the lock is released.
        result = self._result(req, decision, "done", changes=changes, resource_version=cordoned.resource_version)
        return result, _FollowUp(decision, cordoned.condition, drain=True)

    def _follow_up(self, req: CordonRequest, result: ActionResult, follow: _FollowUp) -> ActionResult:
        """The condition, the Event and (for a fresh cordon) the drain, after the lock. A failure here
        is recorded and retryable: the redelivery finds the node cordoned for this incident and completes it."""
        nodes = self.nodes
        assert nodes is not None
        changes = list(result.changes)
        at = self.clock()
        try:
            if _gpu_unhealthy(nodes, req, at, follow.condition):
                changes.append("condition")
            if nodes.emit_event(req.node, key=req.incident_id, kind="cordon", action="Cordon",
                                reason=_event_reason(req), note=f"Cordoned by xidpipe: {follow.decision.reason}",
                                at=at) == "created":
                changes.append("event")
        except ActionError as exc:
            failed = self._failed(req, exc, done=result.model_copy(update={"changes": changes}))
            self._record(failed, details={"changes": failed.changes, "retryable": failed.retryable})
            return failed
        result = result.model_copy(update={"changes": changes})
        if follow.drain and self.policy.drain.enabled:
            report = drain_gpu_pods(nodes, req.node, req.pods, self.policy.drain)
            result = result.model_copy(update={"drain": report})
            self._record_drain(req, report)
        return result

    def _decide(self, req: CordonRequest, current: NodeRead) -> CordonDecision:
        view = current.view
        fleet = FleetView()
        wanted, _, _ = policy_verdict(self.policy, req)
        if wanted and view.exists and not view.cordoned_by_xidpipe and not view.unschedulable:
            assert self.nodes is not None
            since = self.clock() - timedelta(hours=1)
            fleet = self.nodes.fleet_view(self.policy, view.labels, self.store.cordons_since(since),
                                          self.store.last_cordon_version())
        return decide_cordon(req, view, fleet, self.store.breaker(), self.policy, dry_run=self.dry_run)

    def _after_decision(self, req: CordonRequest, decision: CordonDecision,
                        current: NodeRead) -> tuple[ActionResult, _FollowUp | None]:
        """Outcomes other than a fresh cordon: a repeat, a redelivery (complete what a crash may have
        left undone, after the lock), or a refusal."""
        nodes = self.nodes
        assert nodes is not None
        if decision.outcome == "repeat":
            if decision.dry_run:
                return self._result(req, decision, "dry_run"), None
            at = self.clock()
            nodes.record_repeat(req.node, req.count)
            nodes.event_series(req.node, req, at, note=f"Cordoned by xidpipe: {decision.reason}")
            return self._result(req, decision, "done", action="repeat", changes=["annotations", "event_series"]), None
        if decision.outcome == "already_cordoned" and current.view.xidpipe_incident == req.incident_id:
            if decision.dry_run:
                return self._result(req, decision, "noop"), None
            # "done" once per cordon: when its first responder died before recording it, this completes it.
            if self.store.cordon_recorded(req.node, req.incident_id):
                result = self._result(req, decision, "noop")
            else:
                result = self._result(req, decision, "done", resource_version=current.resource_version)
            return result, _FollowUp(decision, current.condition, drain=False)
        if decision.outcome == "already_cordoned":
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
                action: ActionKind = "cordon", changes: list[str] | None = None, retryable: bool = False,
                reason: str | None = None, fleet_alert: FleetAlert | None = None,
                resource_version: str | None = None) -> ActionResult:
        return ActionResult(action=action, outcome=outcome, node=req.node, incident_id=req.incident_id,
                            decision=decision.outcome, reason=reason or decision.reason, dry_run=decision.dry_run,
                            changes=changes or [], retryable=retryable, fleet_alert=fleet_alert,
                            resource_version=resource_version)

    def _record(self, result: ActionResult, details: dict[str, Any], actor: str = "xidpipe") -> None:
        self.store.record(ActionRecord(
            action=result.action, outcome=result.outcome, node=result.node, incident_id=result.incident_id,
            decision=result.decision, reason=result.reason, dry_run=result.dry_run, actor=actor,
            details={k: v for k, v in details.items() if v not in (None, [], {})},
        ))

    def _record_drain(self, req: CordonRequest, report: DrainReport) -> None:
        outcome: ActionOutcome = "done" if report.complete else ("blocked" if report.blocked else "failed")
        reason = (f"evicted {len(report.evicted)}, gone {len(report.gone)}, skipped {len(report.skipped)}, "
                  f"blocked {len(report.blocked)}, failed {len(report.failed)}")
        if report.blocked:
            reason += f"; blocked: {'; '.join(f'{k}: {v}' for k, v in report.blocked.items())}"
        self.store.record(ActionRecord(action="evict", outcome=outcome, node=req.node, incident_id=req.incident_id,
                                       reason=reason[:2000], details=report.model_dump()))

    # --- release ----------------------------------------------------------------------------------

    def release(self, node: str, *, by: str, reason: str, incident_id: str | None = None) -> ActionResult:
        try:
            result = self._release(node, by=by, reason=reason, incident_id=incident_id)
        except ActionError as exc:
            result = ActionResult(action="release", outcome="failed", node=node, incident_id=incident_id,
                                  reason=str(exc), retryable=exc.retryable)
        log.info("release %s: %s", result.outcome, result.reason, extra={"node": node, "by": by})
        self._record(result, details={"changes": result.changes, "operator_reason": reason}, actor=by)
        return result

    def _release(self, node: str, *, by: str, reason: str, incident_id: str | None) -> ActionResult:
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
        if nodes.set_condition(node, "True", "ReleasedByOperator", f"xidpipe cordon for incident {released} "
                               f"released by {by}: {reason}"[:1024], at, after.condition):
            changes.append("condition")
        nodes.emit_event(node, key=f"{released}\x1f{at.isoformat()}", kind="release", action="Uncordon",
                         reason="ReleasedByOperator", note=f"xidpipe cordon for incident {released} released by "
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


def _event_reason(req: CordonRequest) -> str:
    return condition_reason(req.family)


def _gpu_unhealthy(nodes: NodePort, req: CordonRequest, at: datetime, existing: NodeCondition | None) -> bool:
    return nodes.set_condition(req.node, "False", condition_reason(req.family), condition_message(req), at, existing)


def _release_result(node: str, incident_id: str | None, decision: ReleaseDecision, outcome: ActionOutcome,
                    dry_run: bool = False) -> ActionResult:
    return ActionResult(action="release", outcome=outcome, node=node, incident_id=incident_id,
                        decision=decision.outcome, reason=decision.reason, dry_run=dry_run)
