"""The GPU asset ledger in SQL: apply one node's inventory with `models.ledger` and write what changed.

`apply_inventory` loads only what one inventory can touch (the node's open placements, the open
and last closed placements of the cards it lists, the cards it claimed before (a conflict: see
`models.ledger`), their card rows), runs the pure
`GpuLedger.observe()` on it, and writes the closed and opened placements, the ledger events and
the card rows, in the caller's transaction. An inventory at or before the latest one applied for
its node (a redelivery, or one that arrived late) changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.rma import close_replaced
from history.tables import GpuCard, GpuLedgerEvent, GpuLedgerNode, GpuPlacement, NodeState
from models.ledger import GpuLedger, GpuSighting, LedgerEvent, Placement, sighting, sightings

log = logging.getLogger(__name__)

_ARRIVALS = frozenset({"placed", "moved", "replaced", "returned"})  # the card's place changed


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _placement(row: GpuPlacement) -> Placement:
    return Placement(card=row.card, node=row.node, pci_slot=row.pci_slot, uuid=row.uuid, serial=row.serial,
                     name=row.model, mig_layout=tuple(row.mig_layout or ()), vbios=row.vbios, driver=row.driver,
                     valid_from=_utc(row.valid_from), valid_to=_utc(row.valid_to) if row.valid_to else None)


@dataclass
class _Loaded:
    """What the pure ledger needs from SQL for one inventory, and the rows it came from."""

    ledger: GpuLedger
    placements: dict[str, tuple[Placement, GpuPlacement]]  # open placements by card
    cards: dict[str, GpuCard]
    involved: list[str]  # the listed cards and those placed on the node
    known_history: int  # closed placements loaded into `ledger.history`


def apply_inventory(session: Session, node: str, at: datetime, gpus: Iterable[GpuSighting | Mapping[str, Any]],
                    *, driver: str | None = None) -> list[LedgerEvent]:
    """Apply one complete inventory of `node` taken at `at`; returns the ledger events it caused.

    `gpus`: `GpuSighting`s, or the GPUs of an inventory record as the agent publishes them (its
    `gpus` list, `models.node_records.GpuInfo` as JSON), then with the node's `driver` version."""
    s = session
    at = _utc(at)
    if not _advance_mark(s, node, at):
        return []
    seen = [g for g in (x if isinstance(x, GpuSighting) else sighting(x, driver) for x in gpus) if g is not None]
    events = _apply_loaded(s, node, at, seen, _load(s, node, sorted({g.card for g in seen})))
    s.flush()
    return events


def apply_inventories(session: Session, inventories: Sequence[tuple[str, datetime, Mapping[str, Any]]]) -> int:
    """`apply_inventory_payload` for each (node, time, payload), in order; returns the ledger events.

    Inventories of distinct nodes that list and hold distinct cards (a fleet's periodic inventories)
    cannot see each other's changes: what they touch is loaded in four queries for all of them, and
    written in one flush. Otherwise (a node twice, a card on the move between two of them) they are
    applied one by one."""
    s = session
    batch = [(node, _utc(at), sightings(payload)) for node, at, payload in inventories]
    nodes = [node for node, _, _ in batch]
    loaded = _load_many(s, batch) if len(set(nodes)) == len(nodes) > 1 else None
    if loaded is None:
        return sum(len(apply_inventory(s, node, at, seen)) for node, at, seen in batch)
    events = sum(len(_apply_loaded(s, node, at, seen, loaded[node])) for node, at, seen in batch if node in loaded)
    s.flush()
    return events


def _apply_loaded(s: Session, node: str, at: datetime, seen: list[GpuSighting], loaded: _Loaded) -> list[LedgerEvent]:
    """Run the pure ledger on what was loaded for one inventory and write what it changed (not flushed)."""
    events = loaded.ledger.observe(node, at, seen)
    _write_placements(s, loaded, at)
    for e in events:
        s.add(GpuLedgerEvent(kind=e.kind, at=e.at, card=e.card, node=e.node, pci_slot=e.pci_slot, reason=e.reason,
                             previous_node=e.previous_node, previous_slot=e.previous_slot,
                             previous_card=e.previous_card))
        log.info("GPU ledger: %s", e.reason, extra={"node": e.node, "card": e.card, "ledger_event": e.kind})
    _write_cards(s, loaded, events, at)
    close_replaced(s, events)  # a card marked for RMA whose slot holds a new card: its RMA is over
    return events


def _advance_mark(s: Session, node: str, at: datetime) -> bool:
    """Record `at` as the node's latest applied inventory; False when one at or after it was applied."""
    mark = s.get(GpuLedgerNode, node)
    if mark is not None and _utc(mark.inventory_at) >= at:
        return False
    if mark is None:
        s.add(GpuLedgerNode(node=node, inventory_at=at))
    else:
        mark.inventory_at = at
    return True


def _load_many(s: Session, batch: list[tuple[str, datetime, list[GpuSighting]]]) -> dict[str, _Loaded] | None:
    """`_load` for inventories of distinct nodes, in four queries, and their nodes' marks advanced:
    by node, for the inventories newer than their node's mark; None when two of them involve one card."""
    nodes = [node for node, _, _ in batch]
    marks = {m.node: m for m in s.scalars(sa.select(GpuLedgerNode).where(GpuLedgerNode.node.in_(nodes)))}
    batch = [b for b in batch if b[0] not in marks or _utc(marks[b[0]].inventory_at) < b[1]]
    seen_by = {node: sorted({g.card for g in seen}) for node, _, seen in batch}
    all_seen = {c for cards in seen_by.values() for c in cards}
    if len(all_seen) < sum(len(cards) for cards in seen_by.values()):
        return None
    batch_nodes = list(seen_by)
    claimant = sa.select(GpuCard.claimed_by).where(GpuCard.card == GpuPlacement.card).scalar_subquery()
    claimed = sa.select(GpuCard.card).where(GpuCard.claimed_by.in_(batch_nodes))
    open_rows = s.execute(sa.select(GpuPlacement, claimant).where(
        GpuPlacement.valid_to.is_(None), sa.or_(GpuPlacement.node.in_(batch_nodes), GpuPlacement.card.in_(all_seen),
                                                GpuPlacement.card.in_(claimed)))
        .order_by(GpuPlacement.valid_from, GpuPlacement.id)).all()
    owner = {c: node for node, cards in seen_by.items() for c in cards}
    rows_by: dict[str, list[GpuPlacement]] = {node: [] for node in seen_by}
    for row, claimed_by in open_rows:
        mine = {n for n in (row.node, owner.get(row.card), claimed_by) if n in rows_by}
        if len(mine) > 1:  # a card listed (or claimed) by one inventory is placed on another's node
            return None
        rows_by[mine.pop()].append(row)
    loaded = {node: _Loaded(GpuLedger(), {}, {}, [], 0) for node in seen_by}
    for node, rows in rows_by.items():
        for row in rows:
            p = _placement(row)
            loaded[node].ledger.current[row.card] = p
            loaded[node].placements[row.card] = (p, row)
    elsewhere = [c for node, cards in seen_by.items() for c in cards if c not in loaded[node].ledger.current]
    last: dict[str, GpuPlacement] = {}
    if elsewhere:
        for row in s.scalars(sa.select(GpuPlacement).where(GpuPlacement.card.in_(elsewhere),
                                                           GpuPlacement.valid_to.is_not(None))):
            if row.card not in last or _utc(row.valid_from) > _utc(last[row.card].valid_from):
                last[row.card] = row
    involved_by = {node: sorted(set(seen_by[node]) | set(ld.ledger.current)) for node, ld in loaded.items()}
    card_of = {c: node for node, cards in involved_by.items() for c in cards}
    cards = list(s.scalars(sa.select(GpuCard).where(GpuCard.card.in_(list(card_of))))) if card_of else []
    for node, ld in loaded.items():
        ld.ledger.history.extend(_placement(last[c]) for c in seen_by[node] if c in last)
        ld.known_history, ld.involved = len(ld.ledger.history), involved_by[node]
    for c in cards:
        _note_card(loaded[card_of[c.card]], c)
    for node, at, _ in batch:
        if node in marks:
            marks[node].inventory_at = at
        else:
            s.add(GpuLedgerNode(node=node, inventory_at=at))
    return loaded


def _note_card(loaded: _Loaded, c: GpuCard) -> None:
    loaded.cards[c.card] = c
    if c.state == "retired":
        loaded.ledger.retired.add(c.card)
        return
    if c.state == "missing":
        loaded.ledger.missing[c.card] = _utc(c.missing_since or c.last_seen)
    loaded.ledger.listed[c.card] = _utc(c.last_seen)
    if c.claimed_by is not None:
        loaded.ledger.conflicts[c.card] = c.claimed_by


def _load(s: Session, node: str, seen_cards: list[str]) -> _Loaded:
    """Open placements of this node, of the listed cards and of the cards it claimed, the last closed
    placement of listed cards that are nowhere now, and the state of those cards."""
    where_open = [GpuPlacement.node == node,
                  GpuPlacement.card.in_(sa.select(GpuCard.card).where(GpuCard.claimed_by == node))]
    if seen_cards:
        where_open.append(GpuPlacement.card.in_(seen_cards))
    open_rows = list(s.scalars(sa.select(GpuPlacement).where(GpuPlacement.valid_to.is_(None), sa.or_(*where_open))
                               .order_by(GpuPlacement.valid_from, GpuPlacement.id)))
    ledger = GpuLedger()
    placements: dict[str, tuple[Placement, GpuPlacement]] = {}
    for row in open_rows:
        p = _placement(row)
        ledger.current[row.card] = p
        placements[row.card] = (p, row)
    elsewhere = [c for c in seen_cards if c not in ledger.current]
    if elsewhere:
        last: dict[str, GpuPlacement] = {}
        for row in s.scalars(sa.select(GpuPlacement).where(GpuPlacement.card.in_(elsewhere),
                                                           GpuPlacement.valid_to.is_not(None))):
            if row.card not in last or _utc(row.valid_from) > _utc(last[row.card].valid_from):
                last[row.card] = row
        ledger.history.extend(_placement(r) for r in last.values())
    involved = sorted(set(seen_cards) | set(ledger.current))
    loaded = _Loaded(ledger, placements, {}, involved, len(ledger.history))
    for c in s.scalars(sa.select(GpuCard).where(GpuCard.card.in_(involved))) if involved else ():
        _note_card(loaded, c)
    return loaded


def _write_placements(s: Session, loaded: _Loaded, at: datetime) -> None:
    """Close the loaded placements the ledger closed, insert the ones it opened."""
    ledger = loaded.ledger
    closed = {(p.card, p.valid_from): p for p in ledger.history[loaded.known_history:]}
    for card, (p, row) in loaded.placements.items():
        if ledger.current.get(card) is not p:
            ended = closed.get((card, p.valid_from))
            row.valid_to = ended.valid_to if ended is not None and ended.valid_to else at
    mine = {id(p) for p, _ in loaded.placements.values()}
    for p in ledger.current.values():
        if id(p) not in mine:
            s.add(GpuPlacement(card=p.card, node=p.node, pci_slot=p.pci_slot, uuid=p.uuid, serial=p.serial,
                               model=p.name, mig_layout=list(p.mig_layout), vbios=p.vbios, driver=p.driver,
                               valid_from=p.valid_from, valid_to=None))


def _write_cards(s: Session, loaded: _Loaded, events: list[LedgerEvent], at: datetime) -> None:
    """Card rows: where each involved card is now (or was last) and its state."""
    ledger, cards = loaded.ledger, loaded.cards
    arrived = {e.card for e in events if e.kind in _ARRIVALS}
    for card in sorted(set(loaded.involved) | {e.previous_card for e in events if e.previous_card}):
        now = ledger.current.get(card)
        crow = cards.get(card)
        if now is None:
            if crow is not None:  # its slot holds another card now
                crow.state, crow.missing_since, crow.claimed_by = "retired", None, None
            continue
        if crow is None:
            crow = GpuCard(card=card, serial=now.serial, uuid=now.uuid, model=now.name, state="in_service",
                           node=now.node, pci_slot=now.pci_slot, since=at, first_seen=at, last_seen=at,
                           missing_since=None)
            s.add(crow)
            cards[card] = crow
        elif card in arrived:
            crow.since = at
        crow.node, crow.pci_slot, crow.uuid = now.node, now.pci_slot, now.uuid
        crow.serial = now.serial or crow.serial
        crow.model = now.name or crow.model
        crow.last_seen = ledger.listed.get(card, crow.last_seen)  # by its own node: a claim is no sighting
        crow.claimed_by = ledger.conflicts.get(card)
        if card in ledger.missing:
            crow.state, crow.missing_since = "missing", ledger.missing[card]
        else:
            crow.state, crow.missing_since = ("conflict" if crow.claimed_by else "in_service"), None


def apply_inventory_payload(session: Session, node: str, at: datetime, payload: Mapping[str, Any]) -> list[LedgerEvent]:
    """`apply_inventory` for an inventory record as the stream stores it (`node_state.payload`)."""
    return apply_inventory(session, node, at, sightings(payload))


def rebuild_ledger(session: Session, *, reset: bool = False) -> int:
    """Apply the stored inventories (`node_state` rows of kind `inventory`) in time order; with
    `reset`, from an empty ledger, else only those newer than the node's latest applied one.
    Returns how many were applied. Flushes, never commits."""
    s = session
    if reset:
        for table in (GpuLedgerEvent, GpuPlacement, GpuCard, GpuLedgerNode):
            s.execute(sa.delete(table))
    applied = 0
    q = (sa.select(NodeState.node, NodeState.valid_from, NodeState.payload).where(NodeState.kind == "inventory")
         .order_by(NodeState.valid_from, NodeState.id))
    marks = {n.node: _utc(n.inventory_at) for n in s.scalars(sa.select(GpuLedgerNode))}
    for node, valid_from, payload in s.execute(q).all():
        at = _utc(valid_from)
        if node in marks and marks[node] >= at:
            continue
        apply_inventory_payload(s, node, at, payload)
        marks[node] = at
        applied += 1
    return applied
