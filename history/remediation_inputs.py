"""What the remediation loop reads from the history about its incident: the decision's subject (the
cordon request, the card's ledger key, the driver's latest recovery action), whether the node's
capture of the fault is stored, and whether a new fault came after a remediation started. The
responder and `xidpipe replay` ask the same questions here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.cordon_inputs import cordon_request
from history.tables import EvidenceRecord, FaultEvent, Incident
from models.cordon import CordonRequest
from models.ledger import card_key
from models.remediation import RemediationSubject, latest_recovery_action, subject_of
from models.vocabulary import RecoveryAction

RECOVERY_REPORTS = 50  # the latest reports read for the driver's recovery action


@dataclass(frozen=True, slots=True)
class LoopInputs:
    """An incident as its remediation loop needs it."""

    request: CordonRequest
    card: str  # the ledger's key of its card, "" without a GPU UUID
    pci: str
    recovery_action: RecoveryAction | None
    first_seen: datetime
    gpu_uuid: str | None

    @property
    def subject(self) -> RemediationSubject:
        return subject_of(self.request, card=self.card, recovery_action=self.recovery_action)


def recovery_action(s: Session, row: Incident) -> RecoveryAction | None:
    """The driver's latest recovery action on the incident's GPU (its Xid 154 lines, NVML's recovery-action
    events), from the incident's reports and those of the GPU's other incidents on the node."""
    q = (sa.select(FaultEvent.occurred_at, FaultEvent.message)
         .where(FaultEvent.node == row.node, FaultEvent.gpu == row.gpu,
                sa.or_(FaultEvent.xid == 154, FaultEvent.family == "recovery_action"))
         .order_by(FaultEvent.occurred_at.desc()).limit(RECOVERY_REPORTS))
    return latest_recovery_action((at, message or "") for at, message in s.execute(q))


def loop_inputs(s: Session, incident_id: str, longest_window_s: float) -> LoopInputs | None:
    row = s.get(Incident, incident_id)
    if row is None:
        return None
    card = card_key(row.serial, row.gpu_uuid) if row.gpu_uuid else ""
    return LoopInputs(request=cordon_request(s, row, longest_window_s), card=card, pci=row.pci or "",
                      recovery_action=recovery_action(s, row), first_seen=row.first_seen, gpu_uuid=row.gpu_uuid)


def node_capture_stored(s: Session, incident_id: str) -> bool:
    """Is the agent's capture of one of the incident's faults stored (the evidence table)?"""
    events = sa.select(FaultEvent.id, FaultEvent.record_id).where(FaultEvent.incident_id == incident_id).subquery()
    q = sa.select(EvidenceRecord.id).where(sa.or_(
        EvidenceRecord.fault_event_id.in_(sa.select(events.c.id)),
        EvidenceRecord.trigger_record_id.in_(sa.select(events.c.record_id)))).limit(1)
    return s.execute(q).first() is not None


def new_fault_since(s: Session, node: str, gpu: str, since: datetime) -> str | None:
    """A fault on the node's GPU (or of the whole node) that occurred after `since`, described; else None."""
    q = (sa.select(FaultEvent.code, FaultEvent.gpu, FaultEvent.occurred_at, FaultEvent.family)
         .where(FaultEvent.node == node, FaultEvent.occurred_at > since, FaultEvent.family != "application",
                sa.or_(FaultEvent.gpu == gpu, FaultEvent.gpu == "", FaultEvent.gpu == node))
         .order_by(FaultEvent.occurred_at).limit(1))
    found = s.execute(q).first()
    if found is None:
        return None
    code, at_gpu, at, family = found
    return f"{code} ({family}) on {at_gpu or node} at {at.isoformat()}"
