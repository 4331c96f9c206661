"""Opening a remediation loop: the port of the cordon's `remediate` step (`respond.cordon.steps.remediate`).

One loop per cordon: its id is derived from the node, the incident and the cordon's time, so the
step's redelivery finds the loop it opened. The loop is opened queued with the ladder's first
decision recorded; the remediator (`respond.remediation.loop`) takes it from there. In dry run (the
policy's default) the loop is decided, its plan recorded, and it ends at once: nothing is drained,
reset, rebooted or released, and no budget is spent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from history.remediation_inputs import loop_inputs
from history.remediation_store import LoopRow, RemediationStore
from models.cordon import CordonRequest, NodeView, pool_of
from models.cordon_policy import CordonPolicy
from models.remediation import RemediationDecision, decide_remediation, subject_of
from models.remediation_jobs import loop_id
from models.remediation_loop import dry_run_plan
from models.remediation_policy import RemediationPolicy
from models.vocabulary import RemediationStage

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


def history_since(policy: RemediationPolicy, now: datetime) -> datetime:
    """How far back the decision looks: the longest of the RMA and budget windows."""
    longest = max(policy.ladder.rma_window_s, policy.budgets.per_node.window_s, policy.budgets.per_card.window_s)
    return now - timedelta(seconds=longest)


def decision_details(d: RemediationDecision) -> dict[str, object]:
    return {"action": str(d.action), "remedy": d.remedy, "rung": d.rung, "reason": d.reason}


class Intake:
    """Opens loops in `store`; reads the incidents from the history in the same database."""

    def __init__(self, store: RemediationStore, policy: CordonPolicy, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock

    def open_remediation(self, req: CordonRequest, cordoned_at: str, node: NodeView,
                         at: datetime) -> tuple[str, bool, str]:
        lid = loop_id(req.node, req.incident_id, cordoned_at)
        existing = self.store.get(lid)
        if existing is not None:
            return lid, False, f"remediation loop {lid} is {existing.stage}: {existing.reason}"
        rp = self.policy.remediation
        with Session(self.store.engine) as s:
            inputs = loop_inputs(s, req.incident_id, self.policy.longest_window_s())
        subject = inputs.subject if inputs is not None else subject_of(req)
        card = inputs.card if inputs is not None else ""
        history = self.store.history(req.node, card, history_since(rp, at))
        decision = decide_remediation(subject, history, rp, at, loop_id=lid)
        details: dict[str, object] = {"decision": decision_details(decision), "pci": inputs.pci if inputs else ""}
        stage, reason, closed = RemediationStage.QUEUED, f"next: {decision.action}: {decision.reason}", None
        if rp.dry_run:
            plan = dry_run_plan(decision, rp, lid, len(req.pods))
            details["plan"] = plan
            stage, closed = RemediationStage.DRY_RUN, at
            reason = f"dry run: {decision.action}: {decision.reason}; " + "; ".join(plan)
        row = LoopRow(loop_id=lid, incident_id=req.incident_id, node=req.node, gpu=req.gpu, card=card,
                      pool=pool_of(self.policy, node.labels), family=str(req.family), cordoned_at=cordoned_at,
                      stage=str(stage), reason=reason, opened_at=at, stage_since=at, updated_at=at,
                      deadline_at=at + timedelta(seconds=rp.deadline_s), dry_run=rp.dry_run, closed_at=closed,
                      details=details)
        stored, opened = self.store.open(row)
        log.info("remediation loop %s %s for %s on %s: %s", lid, "opened" if opened else "exists", req.incident_id,
                 req.node, stored.reason, extra={"node": req.node, "incident": req.incident_id, "loop": lid,
                                                 "stage": stored.stage})
        return lid, opened, stored.reason
