"""The cordon's Event on the node (events.k8s.io/v1, type Warning, the condition's reason), named after
the node and the incident, so a redelivery finds it instead of adding one; what it changed joins the
cordon's record (`event`). A GPU's quarantine has one too (kind `quarantine`, action `Quarantine`,
naming the GPU, its device and its rule).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from models.cordon import CordonRequest, condition_reason
from models.cordon_policy import CordonPolicy
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger


@runtime_checkable
class EventWriter(Protocol):
    def emit_event(self, name: str, *, key: str, kind: str, action: str, reason: str, note: str,
                   at: datetime, event_type: str = "Warning") -> str:
        """The Event for (node, key, kind), once: 'created', or 'exists' on a redelivery."""
        ...


class EventStep:
    name = "event"
    port = EventWriter
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"cordon", "resume", "quarantine", "quarantine_resume"})
    own_record = False

    def idempotency_key(self, req: CordonRequest) -> str:
        """The Event's name is made of the node, this key and the kind `cordon`."""
        return req.incident_id

    def applies(self, policy: CordonPolicy) -> bool:
        return True

    def run(self, port: EventWriter, ctx: StepContext) -> StepRecord:
        req, d = ctx.req, ctx.decision
        if d.scope == "gpu":
            made = port.emit_event(req.node, key=self.idempotency_key(req), kind="quarantine", action="Quarantine",
                                   reason="GPUQuarantined", note=f"GPU {d.gpu} quarantined by xidpipe (rule "
                                   f"{d.rule_name}, {d.effect}): {d.reason}", at=ctx.at)
        else:
            made = port.emit_event(req.node, key=self.idempotency_key(req), kind="cordon", action="Cordon",
                                   reason=condition_reason(req.family),
                                   note=f"Cordoned by xidpipe: {d.reason}", at=ctx.at)
        created = made == "created"
        return StepRecord(step=self.name, outcome="done" if created else "noop", key=self.idempotency_key(req),
                          changes=["event"] if created else [])


STEP = EventStep()
