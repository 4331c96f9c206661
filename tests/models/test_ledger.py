"""The GPU asset ledger: swaps, moves, returns after RMA, in-place changes, lost cards, cards two nodes claim."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models.ledger import HOLDER_SILENT_S, GpuLedger, GpuSighting, card_key

T0 = datetime(2025, 11, 1, tzinfo=UTC)


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


def gpu(serial: str, slot: str, uuid: str | None = None, driver: str = "550.127.05", **kw: object) -> GpuSighting:
    return GpuSighting(uuid=uuid or f"GPU-{serial}", pci_slot=slot, serial=serial, driver=driver, **kw)  # type: ignore[arg-type]


def kinds(events: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(e.kind, e.card) for e in events]


def test_first_inventory_places_every_card() -> None:
    ledger = GpuLedger()
    events = ledger.observe("n1", day(0), [gpu("A", "0000:18:00.0"), gpu("B", "0000:3b:00.0")])
    assert kinds(events) == [("placed", "serial:A"), ("placed", "serial:B")]
    assert ledger.observe("n1", day(1), [gpu("A", "0000:18:00.0"), gpu("B", "0000:3b:00.0")]) == []


def test_card_replaced_in_a_slot() -> None:
    ledger = GpuLedger()
    ledger.observe("n1", day(0), [gpu("A", "0000:18:00.0"), gpu("B", "0000:3b:00.0")])
    events = ledger.observe("n1", day(5), [gpu("C", "0000:18:00.0", uuid="GPU-new"), gpu("B", "0000:3b:00.0")])
    assert kinds(events) == [("replaced", "serial:C")]
    assert events[0].previous_card == "serial:A"
    (old,) = ledger.placements_of("serial:A")
    assert (old.node, old.pci_slot, old.valid_from, old.valid_to) == ("n1", "0000:18:00.0", day(0), day(5))
    assert ledger.current["serial:C"].uuid == "GPU-new"


def test_card_moved_to_another_node_keeps_its_history() -> None:
    ledger = GpuLedger()
    ledger.observe("n1", day(0), [gpu("A", "0000:18:00.0")])
    ledger.observe("n2", day(0), [gpu("B", "0000:3b:00.0")])
    events = ledger.observe("n2", day(3), [gpu("B", "0000:3b:00.0"), gpu("A", "0000:5e:00.0", uuid="GPU-A-new")])
    assert kinds(events) == [("moved", "serial:A")]
    assert (events[0].previous_node, events[0].previous_slot) == ("n1", "0000:18:00.0")
    placements = ledger.placements_of("serial:A")
    assert [(p.node, p.pci_slot, p.uuid, p.valid_to) for p in placements] == [
        ("n1", "0000:18:00.0", "GPU-A", day(3)),
        ("n2", "0000:5e:00.0", "GPU-A-new", None),
    ]


def test_card_back_after_rma_is_linked_to_its_history() -> None:
    ledger = GpuLedger()
    ledger.observe("n1", day(0), [gpu("A", "0000:18:00.0")])
    ledger.observe("n1", day(2), [gpu("C", "0000:18:00.0")])  # A sent back, C in its slot
    events = ledger.observe("n7", day(40), [gpu("A", "0000:9a:00.0")])
    assert kinds(events) == [("returned", "serial:A")]
    assert "after it was replaced" in events[0].reason and events[0].previous_node == "n1"
    assert [p.node for p in ledger.placements_of("serial:A")] == ["n1", "n7"]


def test_driver_or_mig_change_in_place_opens_a_new_placement() -> None:
    ledger = GpuLedger()
    ledger.observe("n1", day(0), [gpu("A", "0000:18:00.0")])
    events = ledger.observe("n1", day(1), [gpu("A", "0000:18:00.0", driver="570.86.15", mig_layout=("MIG-1", "MIG-2"))])
    assert kinds(events) == [("changed", "serial:A")]
    assert "MIG layout" in events[0].reason and "driver" in events[0].reason
    assert [p.driver for p in ledger.placements_of("serial:A")] == ["550.127.05", "570.86.15"]


def test_a_lost_card_is_missing_not_removed() -> None:
    ledger = GpuLedger()
    ledger.observe("n1", day(0), [gpu("A", "0000:18:00.0"), gpu("B", "0000:3b:00.0")])
    events = ledger.observe("n1", day(1), [gpu("B", "0000:3b:00.0")])
    assert kinds(events) == [("missing", "serial:A")]
    assert "serial:A" in ledger.current and ledger.observe("n1", day(1), [gpu("B", "0000:3b:00.0")]) == []
    assert ledger.observe("n1", day(2), [gpu("A", "0000:18:00.0"), gpu("B", "0000:3b:00.0")]) == []
    assert ledger.missing == {}


def test_cards_without_serial_are_tracked_by_uuid() -> None:
    assert card_key(None, "GPU-1") == "uuid:GPU-1"
    assert card_key("N/A", "GPU-1") == "uuid:GPU-1"
    assert card_key(" 1650922001234 ", "GPU-1") == "serial:1650922001234"


def minutes(n: int) -> timedelta:
    return timedelta(minutes=n)


def test_a_card_claimed_by_a_second_node_stays_with_the_node_that_lists_it_and_is_a_conflict() -> None:
    ledger = GpuLedger()
    ledger.observe("node-b", day(0), [gpu("A", "0000:18:00.0")])
    ledger.observe("node-a", day(0), [gpu("B", "0000:3b:00.0")])
    ledger.observe("node-b", day(1), [gpu("A", "0000:18:00.0")])
    # node-a's inventory names node-b's card (a forged inventory, or a serial read wrong): not a move.
    events = ledger.observe("node-a", day(1) + minutes(2), [gpu("B", "0000:3b:00.0"), gpu("A", "0000:5e:00.0")])
    assert kinds(events) == [("conflict", "serial:A")]
    (conflict,) = events
    assert (conflict.node, conflict.pci_slot, conflict.previous_node, conflict.previous_slot) == (
        "node-a", "0000:5e:00.0", "node-b", "0000:18:00.0")
    assert "node-b" in conflict.reason and "node-a" in conflict.reason
    assert ledger.current["serial:A"].node == "node-b" and ledger.conflicts == {"serial:A": "node-a"}
    # Recorded once; both nodes go on listing it, nothing moves.
    for n in range(1, 6):
        assert ledger.observe("node-b", day(1) + minutes(5 * n), [gpu("A", "0000:18:00.0")]) == []
        assert ledger.observe("node-a", day(1) + minutes(5 * n + 2),
                              [gpu("B", "0000:3b:00.0"), gpu("A", "0000:5e:00.0")]) == []
    assert [p.node for p in ledger.placements_of("serial:A")] == ["node-b"]
    # node-b stops listing it: missing there, and the next claim is a move.
    assert kinds(ledger.observe("node-b", day(1) + minutes(31), [])) == [("missing", "serial:A")]
    events = ledger.observe("node-a", day(1) + minutes(32), [gpu("B", "0000:3b:00.0"), gpu("A", "0000:5e:00.0")])
    assert kinds(events) == [("moved", "serial:A")] and events[0].previous_node == "node-b"
    assert ledger.current["serial:A"].node == "node-a" and ledger.conflicts == {} and ledger.missing == {}


def test_a_conflict_ends_when_the_claiming_node_stops_listing_the_card() -> None:
    ledger = GpuLedger()
    ledger.observe("node-b", day(0), [gpu("A", "0000:18:00.0")])
    ledger.observe("node-a", day(0) + minutes(1), [gpu("A", "0000:5e:00.0")])
    assert ledger.conflicts == {"serial:A": "node-a"}
    events = ledger.observe("node-a", day(0) + minutes(6), [])
    assert kinds(events) == [("resolved", "serial:A")] and events[0].previous_node == "node-b"
    assert ledger.conflicts == {} and ledger.current["serial:A"].node == "node-b" and ledger.missing == {}


def test_a_card_whose_node_has_not_listed_it_for_an_hour_moves() -> None:
    ledger = GpuLedger()
    ledger.observe("node-b", day(0), [gpu("A", "0000:18:00.0")])
    ledger.observe("node-b", day(0) + minutes(30), [gpu("A", "0000:18:00.0")])
    claimed = ledger.observe("node-a", day(0) + minutes(89), [gpu("A", "0000:5e:00.0")])
    assert kinds(claimed) == [("conflict", "serial:A")]
    # node-b is gone (powered off with the card pulled): past HOLDER_SILENT_S after its last listing, a move.
    later = day(0) + minutes(30) + timedelta(seconds=HOLDER_SILENT_S)
    events = ledger.observe("node-a", later, [gpu("A", "0000:5e:00.0")])
    assert kinds(events) == [("moved", "serial:A")] and ledger.conflicts == {}
