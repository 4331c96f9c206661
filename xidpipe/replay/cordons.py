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
since; a repeat's).
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

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at.isoformat(), "node": self.node, "incident_id": self.incident_id,
                "gpu_uuid": self.gpu_uuid, "outcome": self.outcome, "rule": self.rule, "reason": self.reason,
                "steps": list(self.steps)}


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

    def decide(self, req: CordonRequest, gpu_uuid: str | None) -> CordonDecision:
        """Decide one candidate and apply it to the simulated cluster."""
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
        self.verdicts.append(CordonVerdict(at, req.node, req.incident_id, gpu_uuid, decision.outcome, decision.rule,
                                           decision.reason, steps))
        return decision

    def cordons(self) -> list[CordonVerdict]:
        return [v for v in self.verdicts if v.outcome == "cordon"]
