"""The cordon: unschedulable, the `xidpipe.io/gpu-fault` taint and the claim (xidpipe's annotations)
in one write guarded by the node's resourceVersion, so the claim and the cordon are never apart. It
writes the decision itself: it runs under the executor's lock, and its record is the `cordon` record
(`changes`: `unschedulable`, `taint`, `annotations`; `details.resource_version`: the node as written,
which the breaker's pool counts are taken fresh as of). A `Conflict` (the node moved) makes the
executor read the node again and decide again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon import CordonDecision, CordonRequest
from models.cordon_policy import CordonPolicy
from respond.cordon.port import NodeRead
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger


@runtime_checkable
class CordonWriter(Protocol):
    def apply_cordon(self, current: NodeRead, req: CordonRequest, decision: CordonDecision,
                     at: datetime) -> tuple[list[str], NodeRead]:
        """Cordon, taint and claim the node in one write guarded by `current`; what changed and the node
        written. `Conflict` when the node changed since `current` was read."""
        ...


class CordonStep:
    name = "cordon"
    port = CordonWriter
    phase: Phase = "decision"
    triggers: frozenset[Trigger] = frozenset({"cordon"})
    own_record = False

    def idempotency_key(self, req: CordonRequest) -> str:
        """The claim: the node carries the incident's id, and a redelivery finds it (`resume`)."""
        return req.incident_id

    def applies(self, policy: CordonPolicy) -> bool:
        return True

    def run(self, port: CordonWriter, ctx: StepContext) -> StepRecord:
        changes, written = port.apply_cordon(ctx.node, ctx.req, ctx.decision, ctx.at)
        ctx.node = written
        return StepRecord(step=self.name, outcome="done", reason=ctx.decision.reason,
                          key=self.idempotency_key(ctx.req), changes=changes,
                          details={"resource_version": written.resource_version})


STEP = CordonStep()
