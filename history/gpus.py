"""Questions to the GPU asset ledger: which cards are where, and what happened to one card."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.quarantines import active_quarantines
from history.tables import GpuCard, GpuLedgerEvent, GpuPlacement, Incident
from models.vocabulary import HARDWARE_CATEGORIES

CARD_STATES = ("in_service", "missing", "retired", "conflict")


@dataclass(frozen=True, slots=True)
class GpuFilter:
    node: str | None = None
    model: str | None = None  # a part of the model name, any case: "h100"
    state: str | None = None  # in_service, missing, retired, conflict


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _incident_match(serials: list[str], uuids: list[str]) -> Any:
    """A card's incidents; one merged into another (a job's faults that stayed with the GPU) is that one."""
    conds = []
    if serials:
        conds.append(Incident.serial.in_(serials))
    if uuids:
        conds.append(Incident.gpu_uuid.in_(uuids))
    return sa.and_(sa.or_(*conds), Incident.merged_into.is_(None)) if conds else sa.false()


def list_gpus(s: Session, f: GpuFilter, *, limit: int = 50, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """One page of cards ordered by node and PCI slot, with their incident counts and the DeviceTaintRule
    that quarantines each now (`quarantine`, None when none does); and how many match."""
    conds: list[Any] = []
    if f.node:
        conds.append(GpuCard.node == f.node)
    if f.model:
        conds.append(GpuCard.model.icontains(f.model, autoescape=True))  # a `%`, `_` or backslash matches itself
    if f.state:
        conds.append(GpuCard.state == f.state)
    total = s.scalar(sa.select(sa.func.count()).select_from(GpuCard).where(*conds)) or 0
    cards = list(s.scalars(sa.select(GpuCard).where(*conds)
                           .order_by(GpuCard.node, GpuCard.pci_slot, GpuCard.card).limit(limit).offset(offset)))
    serials = [c.serial for c in cards if c.serial]
    uuids = [c.uuid for c in cards]
    by_serial = {c.serial: c.card for c in cards if c.serial}
    by_uuid = {c.uuid: c.card for c in cards}
    counts: dict[str, set[str]] = {c.card: set() for c in cards}
    hardware: dict[str, set[str]] = {c.card: set() for c in cards}
    if cards:
        for incident_id, serial, uuid, category in s.execute(
            sa.select(Incident.incident_id, Incident.serial, Incident.gpu_uuid, Incident.category)
            .where(_incident_match(serials, uuids))
        ):
            card = (by_serial.get(serial) if serial else None) or (by_uuid.get(uuid) if uuid else None)
            if card is None:
                continue
            counts[card].add(incident_id)
            if category in HARDWARE_CATEGORIES:
                hardware[card].add(incident_id)
    held = active_quarantines(s, nodes={c.node for c in cards}) if cards else {}
    rows = [{
        "card": c.card, "serial": c.serial, "uuid": c.uuid, "model": c.model, "node": c.node,
        "pci_slot": c.pci_slot, "since": _iso(c.since), "state": c.state, "last_seen": _iso(c.last_seen),
        "claimed_by": c.claimed_by, "incidents": len(counts[c.card]), "hardware_incidents": len(hardware[c.card]),
        "quarantine": held.get(c.uuid),
    } for c in cards]
    return rows, total


def find_card(s: Session, ident: str) -> GpuCard | None:
    """By card key (`serial:…`, `uuid:…`), board serial, or any UUID the card ever had."""
    card = s.get(GpuCard, ident)
    if card is not None:
        return card
    card = s.scalars(sa.select(GpuCard).where(sa.or_(GpuCard.serial == ident, GpuCard.uuid == ident))
                     .order_by(GpuCard.last_seen.desc()).limit(1)).first()
    if card is not None:
        return card
    key = s.scalars(sa.select(GpuPlacement.card).where(GpuPlacement.uuid == ident)
                    .order_by(GpuPlacement.valid_from.desc()).limit(1)).first()
    return s.get(GpuCard, key) if key else None


def gpu_history(s: Session, ident: str) -> dict[str, Any] | None:
    """A card's placements, ledger events (its own, and swaps that replaced it) and incidents."""
    from history.incident_rows import incident_to_dict

    card = find_card(s, ident)
    if card is None:
        return None
    placements = list(s.scalars(sa.select(GpuPlacement).where(GpuPlacement.card == card.card)
                                .order_by(GpuPlacement.valid_from, GpuPlacement.id)))
    events = list(s.scalars(sa.select(GpuLedgerEvent).where(
        sa.or_(GpuLedgerEvent.card == card.card, GpuLedgerEvent.previous_card == card.card))
        .order_by(GpuLedgerEvent.at, GpuLedgerEvent.id)))
    uuids = sorted({p.uuid for p in placements} | {card.uuid})
    incidents = list(s.scalars(sa.select(Incident).where(
        _incident_match([card.serial] if card.serial else [], uuids))
        .order_by(Incident.first_seen, Incident.incident_id).limit(500)))
    return {
        "card": card.card, "serial": card.serial, "uuid": card.uuid, "model": card.model, "state": card.state,
        "node": card.node, "pci_slot": card.pci_slot, "since": _iso(card.since),
        "first_seen": _iso(card.first_seen), "last_seen": _iso(card.last_seen),
        "missing_since": _iso(card.missing_since), "claimed_by": card.claimed_by,
        "placements": [{
            "node": p.node, "pci_slot": p.pci_slot, "uuid": p.uuid, "mig_layout": list(p.mig_layout or []),
            "vbios": p.vbios, "driver": p.driver, "valid_from": _iso(p.valid_from), "valid_to": _iso(p.valid_to),
        } for p in placements],
        "events": [{
            "kind": e.kind, "at": _iso(e.at), "card": e.card, "node": e.node, "pci_slot": e.pci_slot,
            "reason": e.reason, "previous_node": e.previous_node, "previous_slot": e.previous_slot,
            "previous_card": e.previous_card,
        } for e in events],
        "incidents": [incident_to_dict(i) for i in incidents],
    }


def models_by_uuid(s: Session, uuids: set[str] | None = None) -> dict[str, str]:
    """GPU model names by UUID, from the ledger's placements."""
    q = sa.select(GpuPlacement.uuid, sa.func.max(GpuPlacement.model)).where(GpuPlacement.model.is_not(None))
    if uuids is not None:
        if not uuids:
            return {}
        q = q.where(GpuPlacement.uuid.in_(sorted(uuids)))
    return {u: m for u, m in s.execute(q.group_by(GpuPlacement.uuid)) if m}
