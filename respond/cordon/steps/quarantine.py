"""The quarantine: the incident's GPU taken out with one DRA DeviceTaintRule on its device (a
`quarantine_gpu` rule of the policy; `models.quarantine`), named after the GPU and labelled with the
incident; effect `None` in a dry run, so the rule exists and its status reports what `NoExecute`
would evict. It writes the decision itself: it runs under the executor's lock, and its record is the
`quarantine` record (`changes`: `device_taint_rule`, or `device_taint_rule_effect` for a rule of this
incident whose effect changed; `details`: the rule, the device, the effect, the GPU and the rule's
resourceVersion, which the breaker's GPU counts are taken fresh as of). The node is not written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon import CordonDecision, CordonRequest
from models.cordon_policy import CordonPolicy
from models.quarantine import RuleView
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger


@runtime_checkable
class QuarantineWriter(Protocol):
    def apply_quarantine(self, req: CordonRequest, decision: CordonDecision,
                         at: datetime) -> tuple[list[str], RuleView]:
        """The GPU's rule as the decision wants it (created, or this incident's rule given the decided
        effect); what changed and the rule. `Conflict` when the rule changed while it was written."""
        ...


class QuarantineStep:
    name = "quarantine"
    port = QuarantineWriter
    phase: Phase = "decision"
    triggers: frozenset[Trigger] = frozenset({"quarantine"})
    own_record = False

    def idempotency_key(self, req: CordonRequest) -> str:
        """The rule's name is the GPU's: a redelivery or a repeat finds it (`quarantine_resume`)."""
        return f"{req.gpu}/{req.incident_id}"

    def applies(self, policy: CordonPolicy) -> bool:
        return any(r.quarantines for r in policy.rules)

    def run(self, port: QuarantineWriter, ctx: StepContext) -> StepRecord:
        d = ctx.decision
        changes, rule = port.apply_quarantine(ctx.req, d, ctx.at)
        return StepRecord(step=self.name, outcome="done", reason=d.reason, key=self.idempotency_key(ctx.req),
                          changes=changes,
                          details={"rule": rule.name, "gpu": d.gpu, "device": d.device.text if d.device else None,
                                   "effect": rule.effect, "resource_version": rule.resource_version})


STEP = QuarantineStep()
