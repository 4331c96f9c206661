"""The step seam: what the executor does to a node after the pure cordon decision, one small class per step.

`models.cordon.decide_cordon` decides; a decision that acts on a node is a **trigger**, and the plan
for it is the registered steps (`respond.cordon.steps.STEPS`, in registration order) that run on that
trigger and that the policy turns on:

- `cordon`: a fresh cordon of the node for the incident;
- `repeat`: the incident repeated on the node it holds cordoned (its count grew);
- `resume`: a redelivery finds the node cordoned for this incident: the plan completes what a crash
  (or a failed step) left undone;
- `quarantine`: a fresh quarantine of the incident's GPU (a `quarantine_gpu` rule: a DeviceTaintRule
  on its DRA device instead of the node's cordon);
- `quarantine_resume`: a redelivery or a repeat finds the GPU quarantined for this incident.

A step is:

- `name`: the action kind of its record in the action record (`respond.cordon.action_log`);
- `port`: the `runtime_checkable` Protocol of the cluster calls it makes, declared in its own module;
  the node adapter (`respond.cordon.kube_nodes.KubeNodes`) implements it, and the executor refuses
  at start an adapter that does not;
- `phase`: `decision` for the one step that writes the decision itself (the cordon's guarded patch,
  the repeat's annotation): it runs under the executor's lock and its record is the decision's
  record; `after` for the steps that follow, after the lock, in order;
- `own_record`: False when what it changed joins the decision's record (`changes`), True when it has
  a record of its own (`action` = its name, `details.key` = its idempotency key and
  `details.cordoned_at` the cordon it follows), written after it ran;
- `idempotency_key(request)`: what makes running it twice change nothing: the port makes the effect
  once per key (the Event's name), or, for a step with a record of its own, the executor skips it on
  a `repeat` or `resume` when the action record holds a `done` record of it with this key for the
  same cordon;
- `applies(policy)`: whether the policy turns it on (the drain: `drain.enabled`);
- `run(port, ctx)`: act, and say what happened in a `StepRecord`. A failure the cluster reports is
  an `ActionError` (`respond.errors`): it ends the plan, and the decision's record says so (retryable
  as the error says); a record with outcome `failed` ends the plan too.

A step imports only its port's values (`respond.cordon.port`), this module, `respond.errors` and
`models` (an import-linter contract); steps never import each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from models.cordon import ANN_CORDONED_AT, CordonDecision, CordonRequest, NodeView
from models.cordon_policy import CordonPolicy
from respond.cordon.port import NodeRead

Trigger = Literal["cordon", "repeat", "resume", "quarantine", "quarantine_resume"]
RESUMES: frozenset[str] = frozenset({"resume", "quarantine_resume"})  # no decision to write
Phase = Literal["decision", "after"]
StepOutcome = Literal["done", "noop", "skipped", "blocked", "failed"]
NAME_MAX = 32  # the action record's `action` column
# The executor's own action kinds.
RESERVED = frozenset({"release", "breaker_trip", "breaker_reset", "unquarantine", "quarantine_changed"})


class StepRecord(BaseModel):
    """What one step did: its outcome and reason, what it changed on the node, its key and details."""

    model_config = ConfigDict(frozen=True)

    step: str
    outcome: StepOutcome
    reason: str = ""
    key: str = ""
    changes: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)


@dataclass(slots=True)
class StepContext:
    """What a step acts on. `node` is the node as last read or written: a step that writes the node
    puts what its write returned here, for the steps after it."""

    req: CordonRequest
    decision: CordonDecision
    policy: CordonPolicy
    node: NodeRead
    at: datetime
    trigger: Trigger

    @property
    def cordoned_at(self) -> str:
        """The cordon this plan follows (its `xidpipe.io/cordoned-at`); empty before it is written."""
        return self.node.view.annotations.get(ANN_CORDONED_AT, "")


class Step(Protocol):
    name: str
    port: type[Any]
    phase: Phase
    triggers: frozenset[Trigger]
    own_record: bool

    def idempotency_key(self, req: CordonRequest) -> str: ...

    def applies(self, policy: CordonPolicy) -> bool: ...

    def run(self, port: Any, ctx: StepContext) -> StepRecord: ...


def trigger_of(decision: CordonDecision, node: NodeView, req: CordonRequest) -> Trigger | None:
    """The trigger a decision is, or None when it acts on nothing (refused, skipped, someone else's
    cordon, a breaker trip: those are recorded, and no step runs)."""
    if decision.outcome == "cordon":
        return "cordon"
    if decision.outcome == "repeat":
        return "repeat"
    if decision.outcome == "already_cordoned" and node.xidpipe_incident == req.incident_id:
        return "resume"
    if decision.outcome == "quarantine":
        return "quarantine"
    if decision.outcome == "already_quarantined" and decision.resumes:
        return "quarantine_resume"
    return None
