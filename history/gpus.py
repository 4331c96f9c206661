"""Questions to the GPU asset ledger: which cards are where, what state each is in, and what happened
to one card.

A card's status (`models.gpu_status`) comes from its open hardware incidents and its node's cordon in
the action record; its VBIOS from its placement (the inventory), else from the `nvidia-smi -q` the
agent captured at one of its faults (`models.smi_text`).
"""

from __future__ import annotations

import base64
import gzip
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.action_tables import actions_table
from history.activity import has_table
from history.incident_ids import short_ids
from history.quarantines import active_quarantines
from history.tables import EvidenceRecord, GpuCard, GpuLedgerEvent, GpuPlacement, Incident
from models.gpu_status import CardIncident, card_status, node_cordon
from models.smi_text import vbios_version
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
    """One page of cards ordered by node and PCI slot, with their incident counts, status, VBIOS and the
    DeviceTaintRule that quarantines each now (`quarantine`, None when none does); and how many match."""
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
    incidents = _card_incidents(s, cards)
    cordons = node_cordons(s, {c.node for c in cards})
    vbios = _vbios(s, cards)
    held = active_quarantines(s, nodes={c.node for c in cards}) if cards else {}
    rows = []
    for c in cards:
        mine = incidents[c.card]
        hardware = [i for i in mine if i[1] in HARDWARE_CATEGORIES]
        quarantine = held.get(c.uuid)
        status = card_status(c.state, [i[2] for i in hardware], cordons.get(c.node), c.node,
                             quarantined=quarantine is not None and not quarantine.get("dry_run"))
        version, source = vbios.get(c.card, (None, None))
        rows.append({
            "card": c.card, "serial": c.serial, "uuid": c.uuid, "model": c.model, "node": c.node,
            "pci_slot": c.pci_slot, "since": _iso(c.since), "state": c.state, "last_seen": _iso(c.last_seen),
            "claimed_by": c.claimed_by, "incidents": len(mine), "hardware_incidents": len(hardware),
            "status": status.status, "status_reason": status.reason, "vbios": version, "vbios_from": source,
            "quarantine": quarantine,
        })
    return rows, total


def _card_incidents(s: Session, cards: list[GpuCard]) -> dict[str, list[tuple[str, str, CardIncident]]]:
    """Each card's incidents (not merged ones: they are the incident they were merged into), as
    (incident id, category, what its status needs)."""
    out: dict[str, list[tuple[str, str, CardIncident]]] = {c.card: [] for c in cards}
    if not cards:
        return out
    by_serial = {c.serial: c.card for c in cards if c.serial}
    by_uuid = {c.uuid: c.card for c in cards}
    rows = s.execute(sa.select(Incident.incident_id, Incident.serial, Incident.gpu_uuid, Incident.category,
                               Incident.family, Incident.lifecycle)
                     .where(_incident_match(list(by_serial), list(by_uuid)))
                     .order_by(Incident.first_seen, Incident.incident_id)).all()
    short = short_ids(s, [r.incident_id for r in rows])
    for r in rows:
        card = (by_serial.get(r.serial) if r.serial else None) or (by_uuid.get(r.gpu_uuid) if r.gpu_uuid else None)
        if card is not None:
            out[card].append((r.incident_id, r.category,
                              CardIncident(short[r.incident_id], r.family, r.lifecycle)))
    return out


def node_cordons(s: Session, nodes: set[str]) -> dict[str, str]:
    """Each node's cordon by xidpipe from the action record (`models.gpu_status.node_cordon`)."""
    if not nodes or not has_table(s, "actions"):
        return {}
    t = actions_table.c
    rows = s.execute(sa.select(t.node, t.action, t.outcome).where(t.node.in_(sorted(nodes)),
                                                                 t.action.in_(("cordon", "release")))
                     .order_by(t.at, t.id)).all()
    by_node: dict[str, list[tuple[str, str]]] = {}
    for node, action, outcome in rows:
        by_node.setdefault(node, []).append((action, outcome))
    return {node: state for node, acts in by_node.items() if (state := node_cordon(acts)) is not None}


def _vbios(s: Session, cards: list[GpuCard]) -> dict[str, tuple[str, str]]:
    """Each card's VBIOS and where it was read: its current placement (`inventory`), else the latest
    `nvidia-smi -q` captured at one of its faults (`evidence`)."""
    if not cards:
        return {}
    keys = [c.card for c in cards]
    out: dict[str, tuple[str, str]] = {}
    for card, version in s.execute(sa.select(GpuPlacement.card, GpuPlacement.vbios).where(
            GpuPlacement.card.in_(keys), GpuPlacement.valid_to.is_(None), GpuPlacement.vbios.is_not(None))):
        out[card] = (str(version), "inventory")
    lacking = {c.uuid: c.card for c in cards if c.card not in out}
    for uuid, version in evidence_vbios(s, set(lacking)).items():
        out[lacking[uuid]] = (version, "evidence")
    return out


def evidence_vbios(s: Session, uuids: set[str]) -> dict[str, str]:
    """The VBIOS of each GPU (by UUID) from the latest evidence of it that holds an `nvidia-smi -q`."""
    if not uuids:
        return {}
    out: dict[str, str] = {}
    for uuid, items in s.execute(sa.select(EvidenceRecord.gpu_uuid, EvidenceRecord.items)
                                 .where(EvidenceRecord.gpu_uuid.in_(sorted(uuids)))
                                 .order_by(EvidenceRecord.captured_at.desc(), EvidenceRecord.id.desc())):
        if uuid in out:
            continue
        for item in items or []:
            if item.get("name") == "nvidia-smi-q" and item.get("status", "ok") == "ok":
                version = vbios_version(_decoded(item), uuid)
                if version:
                    out[uuid] = version
                    break
    return out


def _decoded(item: dict[str, Any]) -> str:
    try:
        return gzip.decompress(base64.b64decode(item.get("data", ""))).decode("utf-8", "replace")
    except (ValueError, OSError):
        return ""


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
    captured = evidence_vbios(s, {p.uuid for p in placements if not p.vbios})
    hardware = [i for i in incidents if i.category in HARDWARE_CATEGORIES]
    short = short_ids(s, [i.incident_id for i in incidents])
    status = card_status(card.state, [CardIncident(short[i.incident_id], i.family, i.lifecycle) for i in hardware],
                         node_cordons(s, {card.node}).get(card.node), card.node)
    return {
        "card": card.card, "serial": card.serial, "uuid": card.uuid, "model": card.model, "state": card.state,
        "node": card.node, "pci_slot": card.pci_slot, "since": _iso(card.since),
        "first_seen": _iso(card.first_seen), "last_seen": _iso(card.last_seen),
        "missing_since": _iso(card.missing_since), "claimed_by": card.claimed_by, "status": status.status,
        "status_reason": status.reason,
        "placements": [{
            "node": p.node, "pci_slot": p.pci_slot, "uuid": p.uuid, "mig_layout": list(p.mig_layout or []),
            "vbios": p.vbios or captured.get(p.uuid), "vbios_from": _source(p.vbios, captured.get(p.uuid)),
            "driver": p.driver, "valid_from": _iso(p.valid_from), "valid_to": _iso(p.valid_to),
        } for p in placements],
        "events": [{
            "kind": e.kind, "at": _iso(e.at), "card": e.card, "node": e.node, "pci_slot": e.pci_slot,
            "reason": e.reason, "previous_node": e.previous_node, "previous_slot": e.previous_slot,
            "previous_card": e.previous_card,
        } for e in events],
        "incidents": [incident_to_dict(i) for i in incidents],
    }


def _source(inventory: str | None, evidence: str | None) -> str | None:
    return "inventory" if inventory else ("evidence" if evidence else None)


def models_by_uuid(s: Session, uuids: set[str] | None = None) -> dict[str, str]:
    """GPU model names by UUID, from the ledger's placements."""
    q = sa.select(GpuPlacement.uuid, sa.func.max(GpuPlacement.model)).where(GpuPlacement.model.is_not(None))
    if uuids is not None:
        if not uuids:
            return {}
        q = q.where(GpuPlacement.uuid.in_(sorted(uuids)))
    return {u: m for u, m in s.execute(q.group_by(GpuPlacement.uuid)) if m}
