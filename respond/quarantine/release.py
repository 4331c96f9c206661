"""Release a GPU's quarantine: delete xidpipe's DeviceTaintRule, set the node's condition to what is
left, tell it in an Event, and record it (action `unquarantine`, the rule's incident).

`release_quarantine(executor, by=..., reason=..., gpu=... | incident_id=... | node=...)` is the one
entry: `xidpipe node release` calls it through `release_node` (the node's cordon and its GPUs'
quarantines, or one GPU's with `--gpu`), the reconciliation for rules whose incident people closed,
and the closed loop's return to service (`respond/remediation/`) once a card is back. Only
xidpipe's rules are deleted, only as xidpipe wrote them (`models.quarantine.decide_quarantine_release`),
and each delete carries the rule's resourceVersion, so a rule someone changed meanwhile is never
deleted (it is read again and decided again). A rule with an effect (not a dry run's `None`) is
left in place when the executor is in dry-run mode.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon_policy import CordonPolicy
from models.quarantine import NodeQuarantine, RuleView, decide_quarantine_release, quarantine_condition, rule_name
from respond.cordon.action_log import ActionOutcome, ActionRecord
from respond.cordon.executor import ActionResult, CordonExecutor
from respond.cordon.port import Conflict, NodeCondition, NodeRead
from respond.errors import ActionError

log = logging.getLogger(__name__)


@runtime_checkable
class RuleReleaser(Protocol):
    """What a release needs from the cluster: xidpipe's rules, and the node's condition and Events."""

    def read_rule(self, name: str) -> RuleView | None: ...

    def list_rules(self) -> list[RuleView]: ...

    def delete_rule(self, rule: RuleView) -> bool: ...

    def node_quarantine(self, node: str, policy: CordonPolicy) -> NodeQuarantine: ...

    def read(self, name: str) -> NodeRead: ...

    def set_condition(self, name: str, status: str, reason: str, message: str, at: datetime,
                      existing: NodeCondition | None) -> bool: ...

    def emit_event(self, name: str, *, key: str, kind: str, action: str, reason: str, note: str,
                   at: datetime, event_type: str = "Warning") -> str: ...


def release_quarantine(executor: CordonExecutor, *, by: str, reason: str, gpu: str | None = None,
                       incident_id: str | None = None, node: str | None = None) -> ActionResult | None:
    """Release xidpipe's quarantines: of one GPU (`gpu`; on `node`, when given), else of an incident's
    GPUs (`incident_id`), else of a node's GPUs (`node`; with `incident_id` too, only that incident's). None when the
    executor's adapter holds no rules (no cluster, or no DRA devices) or, for an incident or a node,
    none is found; one result for them all otherwise, each rule recorded on its own."""
    ports = executor.nodes
    if not isinstance(ports, RuleReleaser):
        return None
    try:
        if gpu:
            found = [(gpu, ports.read_rule(rule_name(gpu)))]
            held = found[0][1]
            if node and held is not None and held.node != node:
                return ActionResult(action="unquarantine", outcome="refused", node=node, incident_id=incident_id,
                                    reason=f"GPU {gpu} is quarantined on node {held.node}, not {node}")
        else:
            found = [(r.gpu_uuid, r) for r in ports.list_rules()
                     if (incident_id is None or r.incident_id == incident_id) and (node is None or r.node == node)]
            if not found:
                return None
    except ActionError as exc:
        if not gpu and exc.status in (403, 404):  # rules this cluster does not serve or show: none of xidpipe's
            log.warning("DeviceTaintRules cannot be read (%s): no quarantine to release", exc)
            return None
        return ActionResult(action="unquarantine", outcome="failed", node=node or "", incident_id=incident_id,
                            reason=str(exc), retryable=exc.retryable)
    results = [_release_one(executor, ports, uuid, rule, by=by, reason=reason, incident_id=incident_id)
               for uuid, rule in found]
    return _summary(results, node, incident_id)


def _release_one(executor: CordonExecutor, ports: RuleReleaser, gpu: str, rule: RuleView | None, *, by: str,
                 reason: str, incident_id: str | None) -> ActionResult:
    try:
        result = _delete(executor, ports, gpu, rule, by=by, reason=reason, incident_id=incident_id)
    except ActionError as exc:
        result = ActionResult(action="unquarantine", outcome="failed", node=rule.node if rule else "",
                              incident_id=rule.incident_id if rule else incident_id, reason=str(exc),
                              retryable=exc.retryable, quarantine={"gpu": gpu})
    log.info("unquarantine %s: %s", result.outcome, result.reason, extra={"gpu": gpu, "node": result.node, "by": by})
    executor.store.record(ActionRecord(
        action="unquarantine", outcome=result.outcome, node=result.node or None, incident_id=result.incident_id,
        decision=result.decision, reason=result.reason, dry_run=result.dry_run, actor=by,
        details={"changes": result.changes, "operator_reason": reason, **result.quarantine}))
    return result


def _delete(executor: CordonExecutor, ports: RuleReleaser, gpu: str, rule: RuleView | None, *, by: str, reason: str,
            incident_id: str | None) -> ActionResult:
    for _ in range(executor.conflict_retries):
        decision = decide_quarantine_release(rule, gpu, incident_id)
        node = rule.node if rule else ""
        shown = {"gpu": gpu, **({"rule": rule.name, "effect": rule.effect} if rule else {}),
                 **({"device": rule.device.text} if rule and rule.device else {})}
        base = ActionResult(action="unquarantine", outcome="refused", node=node,
                            incident_id=rule.incident_id if rule else incident_id, decision=decision.outcome,
                            reason=decision.reason, quarantine=shown)
        if decision.outcome != "release" or rule is None:
            return base
        if executor.dry_run and rule.effective:
            return base.model_copy(update={"outcome": "dry_run", "dry_run": True})
        try:
            gone = ports.delete_rule(rule)
        except Conflict:
            rule = ports.read_rule(rule.name)
            continue
        changes = ["device_taint_rule"] if gone else []
        changes += _tell_node(executor, ports, rule, by=by, reason=reason)
        return base.model_copy(update={"outcome": "done", "changes": changes,
                                       "reason": f"{decision.reason}; released by {by}: {reason}"})
    return ActionResult(action="unquarantine", outcome="failed", node=rule.node if rule else "", retryable=True,
                        reason=f"rule of GPU {gpu} kept changing: {executor.conflict_retries} conflicts")


def _tell_node(executor: CordonExecutor, ports: RuleReleaser, rule: RuleView, *, by: str, reason: str) -> list[str]:
    """The node's condition as its remaining quarantines say (left to the cordon's while xidpipe holds
    the node cordoned), and an Event."""
    at, changes = executor.clock(), list[str]()
    current = ports.read(rule.node)
    if not current.view.exists:
        return changes
    if not current.view.cordoned_by_xidpipe:
        status, why, message = quarantine_condition(ports.node_quarantine(rule.node, executor.policy))
        if ports.set_condition(rule.node, status, why, message, at, current.condition):
            changes.append("condition")
    device = rule.device.device if rule.device else rule.gpu_uuid
    ports.emit_event(rule.node, key=f"{rule.name}\x1f{at.isoformat()}", kind="unquarantine", action="Unquarantine",
                     reason="GPUReleased", note=f"xidpipe's quarantine of GPU {rule.gpu_uuid} ({device}, rule "
                     f"{rule.name}) for incident {rule.incident_id} released by {by}: {reason}", at=at,
                     event_type="Normal")
    return [*changes, "event"]


def _still_quarantined(executor: CordonExecutor, node: str) -> bool:
    """After the node's cordon was lifted: its condition says what xidpipe still holds quarantined on
    it (the release set it to healthy), when it holds any GPU; whether it did."""
    ports = executor.nodes
    if not isinstance(ports, RuleReleaser):
        return False
    held = ports.node_quarantine(node, executor.policy)
    if not held.effective:
        return False
    status, why, message = quarantine_condition(held)
    return ports.set_condition(node, status, why, message, executor.clock(), ports.read(node).condition)


def _worst(results: list[ActionResult]) -> ActionOutcome:
    """The outcome of several: failed, else done, else a dry run, else refused."""
    outcomes = [r.outcome for r in results]
    order: tuple[ActionOutcome, ...] = ("failed", "done", "dry_run")
    return next((o for o in order if o in outcomes), "refused")


def _summary(results: list[ActionResult], node: str | None, incident_id: str | None) -> ActionResult:
    if len(results) == 1:
        return results[0]
    outcome = _worst(results)
    return ActionResult(
        action="unquarantine", outcome=outcome, node=node or results[0].node, incident_id=incident_id,
        reason="; ".join(r.reason for r in results), retryable=any(r.retryable for r in results),
        changes=sorted({c for r in results for c in r.changes}), dry_run=all(r.dry_run for r in results))


def release_node(executor: CordonExecutor, node: str, *, by: str, reason: str, incident_id: str | None = None,
                 gpu: str | None = None) -> ActionResult:
    """`xidpipe node release`: xidpipe's cordon of the node and its quarantines of the node's GPUs (of
    `incident_id` only, when given); with `gpu`, that GPU's quarantine alone."""
    if gpu:
        return release_quarantine(executor, by=by, reason=reason, gpu=gpu, node=node,
                                  incident_id=incident_id) or ActionResult(
            action="unquarantine", outcome="refused", node=node, reason="no cluster configured: nothing released")
    cordon = executor.release(node, by=by, reason=reason, incident_id=incident_id)
    gpus = release_quarantine(executor, by=by, reason=reason, node=node, incident_id=incident_id)
    if gpus is None:
        if cordon.outcome == "done" and _still_quarantined(executor, node):
            cordon = cordon.model_copy(update={"changes": [*cordon.changes, "condition"]})
        return cordon
    if cordon.outcome == "refused" and cordon.reason.endswith("carries no cordon by xidpipe"):
        return gpus
    return cordon.model_copy(update={
        "outcome": _worst([cordon, gpus]), "reason": f"{cordon.reason}; {gpus.reason}",
        "changes": [*cordon.changes, *gpus.changes], "retryable": cordon.retryable or gpus.retryable})
