"""The GPU asset ledger: which physical card sat where, and when.

A card is identified by its board serial (its UUID when no serial is known). Node names, PCI slots,
UUIDs and MIG layouts all change when cards are swapped or moved, so the ledger keeps placements:
(card, node, PCI slot, UUID, MIG layout, VBIOS, driver) with a validity interval, and records a
swap event when an inventory shows a slot holding a new card or a card in a new node or slot.
`GpuLedger.observe()` is pure bookkeeping: inventories in, placements and events out.

A card listed by a second node while the node it is placed on still lists it is a **conflict**, not a
move: two boards cannot share a serial, so one of the inventories is wrong (a forged one, from a node
that speaks only for itself, or a serial read wrong), and the ledger cannot tell which. The card stays
where it is, the conflict is recorded once for an operator (`conflicts`, a `conflict` event), and it
becomes a move only once its node stops reporting it: an inventory of that node no longer lists it
(the card is `missing` there), or none has listed it for `HOLDER_SILENT_S` (the node is gone, the card
pulled). It ends (`resolved`) when the claiming node stops listing it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from models.pci import normalize_pci

EventKind = Literal["placed", "moved", "replaced", "returned", "changed", "missing", "conflict", "resolved",
                    "repaired", "rma"]  # the last two: what a remediation loop did to the card (history.rma)

# A node whose inventories have not listed its card for this long no longer reports it: 12 of the agent's
# inventories (`inventory_interval_s`, 5 minutes) missed, which a live node never does, while a node that
# was powered off with the card pulled has stopped reporting it for good.
HOLDER_SILENT_S = 3600.0


def card_key(serial: str | None, uuid: str) -> str:
    """The ledger's identity for a card: `serial:<s>`, or `uuid:<u>` when the board has no serial."""
    s = (serial or "").strip()
    if s and s.upper() not in ("N/A", "[N/A]", "0"):
        return f"serial:{s}"
    return f"uuid:{uuid}"


@dataclass(frozen=True, slots=True)
class GpuSighting:
    """One GPU as one inventory shows it."""

    uuid: str
    pci_slot: str
    serial: str | None = None
    name: str | None = None
    mig_layout: tuple[str, ...] = ()
    vbios: str | None = None
    driver: str | None = None

    @property
    def card(self) -> str:
        return card_key(self.serial, self.uuid)


def mig_layout(devices: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The MIG instances of a GPU as `<MIG UUID> gi<GPU instance>/ci<compute instance>`, by index."""
    out = []
    for d in sorted(devices, key=lambda d: int(d.get("index") or 0)):
        gi, ci = d.get("gpu_instance_id"), d.get("compute_instance_id")
        out.append(f"{d.get('uuid')} gi{'?' if gi is None else gi}/ci{'?' if ci is None else ci}")
    return tuple(out)


def sighting(gpu: Mapping[str, Any], driver: str | None = None) -> GpuSighting | None:
    """One GPU of an inventory record as published by the agent (`models.node_records.GpuInfo` as
    JSON), with the PCI address in canonical form; None when it names no UUID or PCI address."""
    uuid = gpu.get("uuid")
    slot = normalize_pci(gpu.get("pci_bus_id"))
    if not uuid or not slot:
        return None
    return GpuSighting(uuid=uuid, pci_slot=slot, serial=gpu.get("serial"), name=gpu.get("name"),
                       mig_layout=mig_layout(gpu.get("mig_devices") or ()), vbios=gpu.get("vbios_version"),
                       driver=driver)


def sightings(inventory: Mapping[str, Any]) -> list[GpuSighting]:
    """The GPUs of one inventory record (`models.node_records.GpuInventory` as JSON), each with the
    node's driver version."""
    driver = inventory.get("driver_version")
    found = (sighting(g, driver) for g in inventory.get("gpus") or ())
    return [g for g in found if g is not None]


@dataclass(frozen=True, slots=True)
class Placement:
    card: str
    node: str
    pci_slot: str
    uuid: str
    serial: str | None
    name: str | None
    mig_layout: tuple[str, ...]
    vbios: str | None
    driver: str | None
    valid_from: datetime
    valid_to: datetime | None = None  # None: still there


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    kind: EventKind
    at: datetime
    card: str
    node: str
    pci_slot: str
    reason: str
    previous_node: str | None = None
    previous_slot: str | None = None
    previous_card: str | None = None


@dataclass(slots=True)
class GpuLedger:
    """Placements over time. `history` keeps closed placements; `current` the open ones by card."""

    current: dict[str, Placement] = field(default_factory=dict)
    history: list[Placement] = field(default_factory=list)
    # Cards whose placement was closed because another card took their slot (candidates for RMA).
    retired: set[str] = field(default_factory=set)
    # Cards an inventory of their node no longer listed (lost, or pulled), by card.
    missing: dict[str, datetime] = field(default_factory=dict)
    # Cards another node lists while their node still reports them: card -> the node that claims it.
    conflicts: dict[str, str] = field(default_factory=dict)
    # When the node a card is placed on last listed it, by card (absent: since its placement).
    listed: dict[str, datetime] = field(default_factory=dict)

    def _by_slot(self, node: str) -> dict[str, Placement]:
        return {p.pci_slot: p for p in self.current.values() if p.node == node}

    def placements_of(self, card: str) -> list[Placement]:
        """Every placement of a card, oldest first."""
        out = [p for p in self.history if p.card == card]
        if card in self.current:
            out.append(self.current[card])
        return sorted(out, key=lambda p: p.valid_from)

    def _close(self, p: Placement, at: datetime) -> None:
        self.history.append(replace(p, valid_to=at))
        del self.current[p.card]

    def _held_elsewhere(self, here: Placement | None, node: str, at: datetime) -> bool:
        """Whether `here`, a card's placement, is on another node than `node` that still reports it at `at`."""
        if here is None or here.node == node or here.card in self.missing:
            return False
        return (at - self.listed.get(here.card, here.valid_from)).total_seconds() < HOLDER_SILENT_S

    def _claimed(self, node: str, at: datetime, g: GpuSighting, here: Placement) -> list[LedgerEvent]:
        """`node` lists `g`, a card `here` on a node that still reports it: a conflict, recorded once per claimant."""
        if self.conflicts.get(g.card) == node:
            return []
        self.conflicts[g.card] = node
        return [LedgerEvent("conflict", at, g.card, node, g.pci_slot,
                            f"{g.card} is listed by {node} {g.pci_slot} while {here.node} {here.pci_slot} still "
                            f"lists it: it stays on {here.node} until {here.node} stops reporting it",
                            previous_node=here.node, previous_slot=here.pci_slot)]

    def _unclaimed(self, node: str, at: datetime, seen_cards: set[str]) -> list[LedgerEvent]:
        """The conflicts `node` claimed with cards its inventory no longer lists: over."""
        events = []
        for card, claimant in list(self.conflicts.items()):
            if claimant == node and card not in seen_cards:
                del self.conflicts[card]
                here = self.current.get(card)
                holder, slot = (here.node, here.pci_slot) if here is not None else ("?", "?")
                events.append(LedgerEvent("resolved", at, card, node, slot, f"{node} no longer lists {card}: it "
                                          f"stays on {holder} {slot}", previous_node=holder, previous_slot=slot))
        return events

    def observe(self, node: str, at: datetime, gpus: Iterable[GpuSighting]) -> list[LedgerEvent]:
        """Apply one complete inventory of `node` taken at `at`; return what changed."""
        events: list[LedgerEvent] = []
        seen = list(gpus)
        slots = self._by_slot(node)
        seen_cards = {g.card for g in seen}
        for g in seen:
            card = g.card
            here = self.current.get(card)
            if here is not None and self._held_elsewhere(here, node, at):
                events += self._claimed(node, at, g, here)
                continue
            if here is None or here.node != node:  # placed here: whoever claimed it did so rightly
                self.conflicts.pop(card, None)
            self.listed[card] = at
            occupant = slots.get(g.pci_slot)
            new = Placement(card, node, g.pci_slot, g.uuid, g.serial, g.name, g.mig_layout, g.vbios, g.driver, at)
            if here is not None and here.node == node and here.pci_slot == g.pci_slot:
                self.missing.pop(card, None)
                changed = [
                    name
                    for name, old, now in (
                        ("uuid", here.uuid, g.uuid),
                        ("MIG layout", here.mig_layout, g.mig_layout),
                        ("VBIOS", here.vbios, g.vbios),
                        ("driver", here.driver, g.driver),
                    )
                    if old != now
                ]
                if changed:
                    self._close(here, at)
                    self.current[card] = new
                    events.append(LedgerEvent("changed", at, card, node, g.pci_slot,
                                              f"{', '.join(changed)} changed in place"))
                continue
            replaced = occupant is not None and occupant.card != card and occupant.card not in seen_cards
            if occupant is not None and replaced:
                self._close(occupant, at)
                self.retired.add(occupant.card)
                self.missing.pop(occupant.card, None)
                self.conflicts.pop(occupant.card, None)
                events.append(LedgerEvent("replaced", at, card, node, g.pci_slot,
                                          f"slot {g.pci_slot} on {node} now holds {card} instead of {occupant.card}",
                                          previous_card=occupant.card))
            if here is not None:
                self._close(here, at)
                self.missing.pop(card, None)
                events.append(LedgerEvent("moved", at, card, node, g.pci_slot,
                                          f"{card} moved from {here.node} {here.pci_slot} to {node} {g.pci_slot}",
                                          previous_node=here.node, previous_slot=here.pci_slot))
            elif any(p.card == card for p in self.history):
                last = max((p for p in self.history if p.card == card), key=lambda p: p.valid_from)
                was_retired = card in self.retired
                self.retired.discard(card)
                self.missing.pop(card, None)
                events.append(LedgerEvent(
                    "returned", at, card, node, g.pci_slot,
                    f"{card} is back{' after it was replaced' if was_retired else ''}, last seen on "
                    f"{last.node} {last.pci_slot} until {last.valid_to.isoformat() if last.valid_to else '?'}",
                    previous_node=last.node, previous_slot=last.pci_slot))
            elif not replaced:  # a new card in a replaced slot is reported by the "replaced" event
                events.append(LedgerEvent("placed", at, card, node, g.pci_slot, f"{card} first seen"))
            self.current[card] = new
        for p in list(self.current.values()):
            if p.node == node and p.card not in seen_cards and p.card not in self.missing:
                self.missing[p.card] = at
                events.append(LedgerEvent("missing", at, p.card, node, p.pci_slot,
                                          f"{p.card} absent from the inventory of {node}"))
        return events + self._unclaimed(node, at, seen_cards)
