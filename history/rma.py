"""The GPU ledger and the remediation loop: a card a loop marked for RMA (`history.remediation_tables.gpu_rma`)
stays open until the ledger sees a new card in its slot; then the RMA closes, naming the card that
replaced it (`close_replaced`, run in the ledger's transaction by `history.ledger_store`: it flushes,
never commits). The ledger's events record what a loop did to a card: `repaired` (returned to service
after validation), `rma` (`record_ledger_event`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.remediation_tables import gpu_rma_table as rma
from history.tables import GpuLedgerEvent
from models.ledger import LedgerEvent

log = logging.getLogger(__name__)


def close_replaced(s: Session, events: Iterable[LedgerEvent]) -> int:
    """Close the open RMAs of the cards a `replaced` event says another card took the slot of; how many."""
    closed = 0
    for e in events:
        if e.kind != "replaced" or not e.previous_card:
            continue
        done = cast(sa.CursorResult[Any], s.execute(rma.update().where(
            rma.c.closed_at.is_(None),
            sa.or_(rma.c.card == e.previous_card, sa.and_(rma.c.node == e.node, rma.c.pci_slot == e.pci_slot)),
        ).values(closed_at=e.at, replaced_by=e.card, close_reason=f"slot {e.pci_slot} on {e.node} now holds {e.card}")))
        if done.rowcount:
            closed += done.rowcount
            log.info("RMA of %s closed: %s replaced it in %s on %s", e.previous_card, e.card, e.pci_slot, e.node,
                     extra={"node": e.node, "card": e.previous_card})
    return closed


def record_ledger_event(engine: sa.Engine, loop: Any, kind: str, reason: str, at: datetime) -> bool:
    """The ledger's record of what a remediation loop did to its card: `repaired` (returned to service after
    validation) or `rma`, once per loop; nothing for a loop without a card (no GPU UUID known). True when
    recorded now."""
    if not loop.card:
        return False
    mark = f"remediation loop {loop.loop_id})"
    with Session(engine) as s, s.begin():
        done = s.scalar(sa.select(GpuLedgerEvent.id).where(
            GpuLedgerEvent.card == loop.card, GpuLedgerEvent.kind == kind,
            GpuLedgerEvent.reason.endswith(mark, autoescape=True)).limit(1))
        if done is not None:  # recorded before a crash: once per loop and kind
            return False
        s.add(GpuLedgerEvent(kind=kind, at=at, card=loop.card, node=loop.node,
                             pci_slot=str(loop.details.get("pci") or ""),
                             reason=f"{reason} (incident {loop.incident_id}, {mark}"))
    return True
