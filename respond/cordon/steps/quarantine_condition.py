"""The node's `GPUHealthy` condition after a GPU quarantine: how many of its GPUs xidpipe holds
quarantined, each with its device, UUID, rule, effect and incident (`models.quarantine.quarantine_condition`).
Set only when the node's condition says something else, and not on a node xidpipe holds cordoned
(the cordon's condition says more); what it changed joins the quarantine's record (`condition`).
It is the only node field a quarantine writes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon import CONDITION_TYPE, CordonRequest
from models.cordon_policy import CordonPolicy
from models.quarantine import NodeQuarantine, quarantine_condition
from respond.cordon.port import NodeCondition
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger


@runtime_checkable
class QuarantineConditionWriter(Protocol):
    def node_quarantine(self, node: str, policy: CordonPolicy) -> NodeQuarantine:
        """The node's GPU devices and xidpipe's rules on them, as they stand."""
        ...

    def set_condition(self, name: str, status: str, reason: str, message: str, at: datetime,
                      existing: NodeCondition | None) -> bool:
        """Set the `GPUHealthy` condition unless `existing` says the same already; whether it changed."""
        ...


class QuarantineConditionStep:
    name = "quarantine_condition"
    port = QuarantineConditionWriter
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"quarantine", "quarantine_resume"})
    own_record = False

    def idempotency_key(self, req: CordonRequest) -> str:
        """The condition itself: one per node, compared with what the node says before it is written."""
        return f"{req.node}/{CONDITION_TYPE}"

    def applies(self, policy: CordonPolicy) -> bool:
        return any(r.quarantines for r in policy.rules)

    def run(self, port: QuarantineConditionWriter, ctx: StepContext) -> StepRecord:
        key = self.idempotency_key(ctx.req)
        if ctx.node.view.cordoned_by_xidpipe:
            return StepRecord(step=self.name, outcome="noop", key=key,
                              reason="the node is cordoned by xidpipe: its cordon's condition stands")
        status, reason, message = quarantine_condition(port.node_quarantine(ctx.req.node, ctx.policy))
        if status == "True" and ctx.node.condition is None:
            return StepRecord(step=self.name, outcome="noop", key=key, reason="no GPU of the node is quarantined")
        changed = port.set_condition(ctx.req.node, status, reason, message, ctx.at, ctx.node.condition)
        return StepRecord(step=self.name, outcome="done" if changed else "noop", key=key,
                          changes=["condition"] if changed else [])


STEP = QuarantineConditionStep()
