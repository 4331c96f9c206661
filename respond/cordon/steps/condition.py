"""The node's `GPUHealthy` condition set to False, Node Problem Detector style: the reason per fault
family, the message with the Xids, the GPU and the incident. Set only when the node's condition says
something else, so a redelivery changes nothing; what it changed joins the cordon's record
(`condition`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon import CONDITION_TYPE, CordonRequest, condition_message, condition_reason
from models.cordon_policy import CordonPolicy
from respond.cordon.port import NodeCondition
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger


@runtime_checkable
class ConditionWriter(Protocol):
    def set_condition(self, name: str, status: str, reason: str, message: str, at: datetime,
                      existing: NodeCondition | None) -> bool:
        """Set the `GPUHealthy` condition unless `existing` says the same already; whether it changed."""
        ...


class ConditionStep:
    name = "condition"
    port = ConditionWriter
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"cordon", "resume"})
    own_record = False

    def idempotency_key(self, req: CordonRequest) -> str:
        """The condition itself: one per node, compared with what the node says before it is written."""
        return f"{req.node}/{CONDITION_TYPE}"

    def applies(self, policy: CordonPolicy) -> bool:
        return True

    def run(self, port: ConditionWriter, ctx: StepContext) -> StepRecord:
        req = ctx.req
        changed = port.set_condition(req.node, "False", condition_reason(req.family), condition_message(req), ctx.at,
                                     ctx.node.condition)
        return StepRecord(step=self.name, outcome="done" if changed else "noop", key=self.idempotency_key(req),
                          changes=["condition"] if changed else [])


STEP = ConditionStep()
