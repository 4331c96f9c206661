"""Reconcile xidpipe's DeviceTaintRules with the incidents, at start and every interval: the rules
live in the cluster and survive the responder's restarts; what they are for lives in SQL.

Each pass lists xidpipe's rules (label `app.kubernetes.io/managed-by=xidpipe`) and decides each
(`models.quarantine.reconcile_rule`) on its incident's lifecycle:

- the incident is `repaired`, `returned` or `closed`: the rule is released (`release_quarantine`,
  recorded as `unquarantine` by `xidpipe-reconcile`);
- someone changed the rule (its effect or device is not what xidpipe wrote), or the history has no
  such incident: it is left alone and reported, once per version of the rule's spec: a warning in the log
  and a `quarantine_changed` record (outcome `refused`) on its incident;
- otherwise it is kept.

And a rule the history says holds a GPU (`history.quarantines`) that the cluster no longer has
(someone deleted it) is recorded as released (`unquarantine`, decision `rule_missing`), so the
incident, its ticket and `xidpipe gpus list` stop showing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.quarantines import active_quarantines
from history.tables import Incident
from models.quarantine import ReconcileDecision, RuleView, reconcile_rule
from respond.cordon.action_log import ActionRecord
from respond.cordon.executor import CordonExecutor
from respond.errors import ActionError
from respond.quarantine.release import RuleReleaser, release_quarantine

log = logging.getLogger(__name__)

ACTOR = "xidpipe-reconcile"


@dataclass(frozen=True, slots=True)
class Reconciled:
    rule: str
    action: str  # keep, remove, report, missing
    reason: str
    outcome: str = ""


@dataclass(slots=True)
class QuarantineReconciler:
    engine: sa.Engine
    executor: CordonExecutor
    _reported: set[tuple[str, str | None]] = field(default_factory=set)

    def pass_once(self) -> list[Reconciled]:
        """One pass over the cluster's rules and the history's; what was decided for each."""
        ports = self.executor.nodes
        if not isinstance(ports, RuleReleaser):
            return []
        held = self._held()
        rules = ports.list_rules()
        lifecycles = self._lifecycles({r.incident_id for r in rules if r.incident_id})
        out = [self._one(r, reconcile_rule(r, lifecycles.get(r.incident_id))) for r in rules]
        present = {r.name for r in rules}
        for gpu, q in held.items():
            if q["rule"] not in present and ports.read_rule(q["rule"]) is None and gpu in self._held():
                out.append(self._missing(gpu, q))
        return out

    def _one(self, rule: RuleView, decision: ReconcileDecision) -> Reconciled:
        if decision.action == "remove":
            result = release_quarantine(self.executor, by=ACTOR, reason=decision.reason, gpu=rule.gpu_uuid,
                                        incident_id=rule.incident_id)
            return Reconciled(rule.name, "remove", decision.reason, result.outcome if result else "")
        # Once per version of the rule's spec (its generation): the eviction controller's status
        # updates move its resourceVersion, not what people changed.
        version = str(rule.generation) if rule.generation is not None else rule.resource_version
        if decision.action == "report" and (rule.name, version) not in self._reported:
            self._reported.add((rule.name, version))
            log.warning("quarantine reconciliation: %s", decision.reason, extra={
                "rule": rule.name, "node": rule.node, "gpu": rule.gpu_uuid, "incident": rule.incident_id})
            self.executor.store.record(ActionRecord(
                action="quarantine_changed", outcome="refused", node=rule.node or None,
                incident_id=rule.incident_id or None, reason=decision.reason, actor=ACTOR,
                details={"rule": rule.name, "gpu": rule.gpu_uuid, "effect": rule.effect,
                         "device": rule.device.text if rule.device else None}))
        return Reconciled(rule.name, decision.action, decision.reason)

    def _missing(self, gpu: str, q: dict[str, str]) -> Reconciled:
        reason = f"rule {q['rule']} of GPU {gpu} is no longer in the cluster (deleted by someone else)"
        log.warning("quarantine reconciliation: %s", reason, extra={"rule": q["rule"], "gpu": gpu})
        self.executor.store.record(ActionRecord(
            action="unquarantine", outcome="done", node=q.get("node"), incident_id=q.get("incident_id"),
            decision="rule_missing", reason=reason, actor=ACTOR,
            details={"rule": q["rule"], "gpu": gpu, "effect": q.get("effect"), "device": q.get("device")}))
        return Reconciled(q["rule"], "missing", reason, "done")

    def _held(self) -> dict[str, dict[str, str]]:
        with Session(self.engine) as s:
            return active_quarantines(s)

    def _lifecycles(self, incidents: set[str]) -> dict[str, str]:
        if not incidents:
            return {}
        with Session(self.engine) as s:
            rows = s.execute(sa.select(Incident.incident_id, Incident.lifecycle)
                             .where(Incident.incident_id.in_(incidents)))
            return {i: lc for i, lc in rows}

    async def run(self, stop: asyncio.Event, interval_s: float) -> None:
        """A pass at once (the rules outlived a restart), then every `interval_s` until `stop` is set."""
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.pass_once)
            except ActionError as exc:
                log.warning("quarantine reconciliation failed: %s; again in %.0f s", exc, interval_s)
            except Exception:
                log.exception("quarantine reconciliation failed; again in %.0f s", interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
