"""The remediation step: once xidpipe cordoned a node for an incident, open the remediation loop that
drains, resets or reboots as NVIDIA advises, validates and returns the node (`respond.remediation`),
when the policy's `remediation.enabled` says so.

The loop is one per cordon (node, incident, the cordon's `xidpipe.io/cordoned-at`): a redelivery
(`resume`) finds it open and changes nothing. The step decides nothing itself: its port opens the
loop, which asks the one remediation decision (`models.remediation.decide_remediation`); in dry run
(the policy's default) the loop records what it would have done and ends there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon import CordonRequest, NodeView
from models.cordon_policy import CordonPolicy
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger


@runtime_checkable
class RemediationIntake(Protocol):
    """Opens the remediation loop of a cordon (`respond.remediation.intake.Intake`)."""

    def open_remediation(self, req: CordonRequest, cordoned_at: str, node: NodeView,
                         at: datetime) -> tuple[str, bool, str]:
        """(the loop's id, whether it was opened now, what it decided or where it stands)."""
        ...


class RemediateStep:
    name = "remediate"
    port = RemediationIntake
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"cordon", "resume"})
    own_record = True

    def idempotency_key(self, req: CordonRequest) -> str:
        return f"{req.node}/{req.incident_id}/remediate"

    def applies(self, policy: CordonPolicy) -> bool:
        return policy.remediation.enabled

    def run(self, port: RemediationIntake, ctx: StepContext) -> StepRecord:
        loop, opened, why = port.open_remediation(ctx.req, ctx.cordoned_at, ctx.node.view, ctx.at)
        return StepRecord(step=self.name, outcome="done" if opened else "noop", reason=why,
                          key=self.idempotency_key(ctx.req), details={"loop": loop})


STEP = RemediateStep()
