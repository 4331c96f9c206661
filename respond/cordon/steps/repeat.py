"""The repeat: the incident repeated on the node it holds cordoned. The node's
`xidpipe.io/occurrences` annotation takes the new count and the cordon's Event its `series`. It
writes the decision itself (under the executor's lock); its record is the `repeat` record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon import ANN_OCCURRENCES, CordonRequest
from models.cordon_policy import CordonPolicy
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger


@runtime_checkable
class RepeatWriter(Protocol):
    def annotate(self, name: str, annotations: dict[str, str]) -> None:
        """Set these `xidpipe.io/` annotations on the node (a merge patch: nothing else changes)."""
        ...

    def event_series(self, name: str, req: CordonRequest, at: datetime, note: str) -> str:
        """A repeat of the incident on its cordon Event: 'series', or what `emit_event` says when it expired."""
        ...


class RepeatStep:
    name = "repeat"
    port = RepeatWriter
    phase: Phase = "decision"
    triggers: frozenset[Trigger] = frozenset({"repeat"})
    own_record = False

    def idempotency_key(self, req: CordonRequest) -> str:
        """The count: the decision repeats only while the request's count passes the node's annotation."""
        return f"{req.incident_id}#{req.count}"

    def applies(self, policy: CordonPolicy) -> bool:
        return True

    def run(self, port: RepeatWriter, ctx: StepContext) -> StepRecord:
        port.annotate(ctx.req.node, {ANN_OCCURRENCES: str(ctx.req.count)})
        port.event_series(ctx.req.node, ctx.req, ctx.at, note=f"Cordoned by xidpipe: {ctx.decision.reason}")
        return StepRecord(step=self.name, outcome="done", reason=ctx.decision.reason,
                          key=self.idempotency_key(ctx.req), changes=["annotations", "event_series"])


STEP = RepeatStep()
