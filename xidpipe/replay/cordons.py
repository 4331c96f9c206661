"""The responder's cordon decision over a replay, as a dry run with the circuit breaker.

Each cordon candidate the stream offers is decided by `models.cordon.decide_cordon` under the YAML
cordon policy, exactly as the responder decides it, against a simulated cluster: the nodes of the
recorded cluster (labelled, and its pools sized, as `replay.json` says), the cordons this replay has made so far (so a
repeat finds its node already cordoned), the cordons of the hour before the incident's latest
fault (event time), and the breaker, which trips when a cordon would pass its limits and then
holds every later cordon. Nothing is written anywhere.

Each verdict that changes the node (a cordon, a repeat) lists the steps the responder's plan would
run for it, from the step registry as the executor reads it (`respond.cordon.steps.plan`: the
cordon, the condition, the Event, the drain when the policy turns it on, and any step registered
since; a repeat's). Each cordon also says what the remediation loop after it would do (the one
remediation decision, `models.remediation.decide_remediation`, and the loop's plan as its dry run
records it), whether or not the policy turns remediation on yet: a replay is how a site reads it first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from models.cordon import (
    ANN_CORDONED_AT,
    ANN_INCIDENT,
    ANN_OCCURRENCES,
    BreakerState,
    CordonDecision,
    CordonRequest,
    FleetView,
    NodeView,
    decide_cordon,
    pool_of,
)
from models.cordon_policy import CordonPolicy
from models.remediation import RemediationSubject, decide_remediation, subject_of
from models.remediation_jobs import loop_id
from models.remediation_loop import dry_run_plan
from respond.cordon.steps import plan, trigger_of

_HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class CordonVerdict:
    """One decision on one candidate: what the responder would have done, and why."""

    at: datetime
    node: str
    incident_id: str
    gpu_uuid: str | None
    outcome: str
    rule: str | None
    reason: str
    steps: tuple[str, ...] = ()
    remediation: dict[str, Any] | None = None  # a cordon's: what its remediation loop would do

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"at": self.at.isoformat(), "node": self.node, "incident_id": self.incident_id,
               "gpu_uuid": self.gpu_uuid, "outcome": self.outcome, "rule": self.rule, "reason": self.reason,
               "steps": list(self.steps)}
        if self.remediation is not None:
            out["remediation"] = self.remediation
        return out


@dataclass(slots=True)
class DryRunCluster:
    policy: CordonPolicy
    node_labels: dict[str, dict[str, str]]
    nodes: list[str]
    pool_nodes: dict[str, int] = field(default_factory=dict)  # pool → its real size (default: its recorded nodes)
    cordoned: dict[str, tuple[str, int, datetime]] = field(default_factory=dict)  # node → (incident, count, at)
    breaker: BreakerState = field(default_factory=BreakerState)
    verdicts: list[CordonVerdict] = field(default_factory=list)

    def _view(self, node: str) -> NodeView:
        labels = self.node_labels.get(node, {})
        held = self.cordoned.get(node)
        if held is None:
            return NodeView(name=node, labels=labels)
        incident, count, at = held
        return NodeView(name=node, labels=labels, unschedulable=True, annotations={
            ANN_CORDONED_AT: at.isoformat(), ANN_INCIDENT: incident, ANN_OCCURRENCES: str(count)})

    def _fleet(self, node: str, at: datetime) -> FleetView:
        pool = pool_of(self.policy, self.node_labels.get(node, {}))
        members = [n for n in self.nodes if pool_of(self.policy, self.node_labels.get(n, {})) == pool]
        mine = sum(1 for n in self.cordoned if n in members)
        recent = sum(1 for _, _, t in self.cordoned.values() if at - _HOUR <= t <= at)
        size = max(len(members), self.pool_nodes.get(pool, 0))
        return FleetView(pool=pool, pool_nodes=size, pool_cordoned_by_xidpipe=mine, cordons_last_hour=recent)

    def decide(self, req: CordonRequest, gpu_uuid: str | None,
               subject: RemediationSubject | None = None) -> CordonDecision:
        """Decide one candidate and apply it to the simulated cluster (`subject`: the incident as the
        remediation decision sees it; its cordon request alone when not given)."""
        at = req.last_seen
        view = self._view(req.node)
        decision = decide_cordon(req, view, self._fleet(req.node, at), self.breaker, self.policy, dry_run=True)
        trigger = trigger_of(decision, view, req) if decision.changes_node else None  # a replay crashes nowhere
        steps = tuple(s.name for s in plan(trigger, self.policy)) if trigger is not None else ()
        if decision.outcome == "cordon":
            self.cordoned[req.node] = (req.incident_id, req.count, at)
        elif decision.outcome == "repeat":
            incident, _, since = self.cordoned[req.node]
            self.cordoned[req.node] = (incident, req.count, since)
        elif decision.outcome == "trip_breaker":
            self.breaker = BreakerState(tripped=True, tripped_at=at, reason=decision.reason,
                                        pool=pool_of(self.policy, self.node_labels.get(req.node, {})))
        remediation = self._remediation(req, subject, at) if decision.outcome == "cordon" else None
        self.verdicts.append(CordonVerdict(at, req.node, req.incident_id, gpu_uuid, decision.outcome, decision.rule,
                                           decision.reason, steps, remediation))
        return decision

    def _remediation(self, req: CordonRequest, subject: RemediationSubject | None, at: datetime) -> dict[str, Any]:
        """What the remediation loop after this cordon would do: its decision and its plan."""
        rp = self.policy.remediation
        lid = loop_id(req.node, req.incident_id, at.isoformat())
        d = decide_remediation(subject or subject_of(req), (), rp, at, loop_id=lid)
        return {"enabled": rp.enabled, "action": str(d.action), "remedy": d.remedy, "reason": d.reason,
                "plan": dry_run_plan(d, rp, lid, len(req.pods))}

    def cordons(self) -> list[CordonVerdict]:
        return [v for v in self.verdicts if v.outcome == "cordon"]
