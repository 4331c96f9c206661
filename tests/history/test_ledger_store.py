"""The GPU asset ledger in SQL: swaps, moves, a return after RMA, redelivery, and the rebuild."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.ledger_store import apply_inventory, apply_inventory_payload, rebuild_ledger
from history.migrate import upgrade
from history.queries import GpuFilter, gpu_history, list_gpus
from history.tables import GpuCard, GpuLedgerEvent, GpuPlacement, NodeState
from models.ledger import GpuSighting

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SLOT_A, SLOT_B = "0000:18:00.0", "0000:3b:00.0"


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


def gpu(serial: str, slot: str, uuid: str | None = None, driver: str = "550.127.05") -> GpuSighting:
    return GpuSighting(uuid=uuid or f"GPU-{serial}", pci_slot=slot, serial=serial, name="NVIDIA H100 80GB HBM3",
                       driver=driver)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    e = make_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    upgrade(e)
    yield e
    e.dispose()


def apply(e: sa.Engine, node: str, at: datetime, *gpus: GpuSighting) -> list[tuple[str, str]]:
    with Session(e) as s, s.begin():
        return [(ev.kind, ev.card) for ev in apply_inventory(s, node, at, gpus)]


def placements(e: sa.Engine, card: str) -> list[tuple[str, str, str, datetime, datetime | None]]:
    with Session(e) as s:
        rows = s.scalars(sa.select(GpuPlacement).where(GpuPlacement.card == card).order_by(GpuPlacement.valid_from))
        return [(p.node, p.pci_slot, p.uuid, p.valid_from.astimezone(UTC),
                 p.valid_to.astimezone(UTC) if p.valid_to else None) for p in rows]


def card(e: sa.Engine, key: str) -> GpuCard:
    with Session(e) as s:
        row = s.get(GpuCard, key)
        assert row is not None
        s.expunge(row)
        return row


def test_swap_scenario(engine: sa.Engine) -> None:
    e = engine
    placed = apply(e, "n1", day(0), gpu("A", SLOT_A), gpu("B", SLOT_B))
    assert placed == [("placed", "serial:A"), ("placed", "serial:B")]
    assert apply(e, "n2", day(0), gpu("D", SLOT_A)) == [("placed", "serial:D")]

    # B moves from n1 to n2's second slot (n1 reports first: B is missing there, then n2 lists it).
    assert apply(e, "n1", day(2), gpu("A", SLOT_A)) == [("missing", "serial:B")]
    assert card(e, "serial:B").state == "missing"
    assert apply(e, "n2", day(2), gpu("D", SLOT_A), gpu("B", SLOT_B, uuid="GPU-B2")) == [("moved", "serial:B")]
    assert placements(e, "serial:B") == [("n1", SLOT_B, "GPU-B", day(0), day(2)),
                                         ("n2", SLOT_B, "GPU-B2", day(2), None)]
    b = card(e, "serial:B")
    assert (b.node, b.pci_slot, b.state, b.uuid, b.missing_since) == ("n2", SLOT_B, "in_service", "GPU-B2", None)

    # A is replaced by C in n1's first slot: A is retired.
    assert apply(e, "n1", day(5), gpu("C", SLOT_A)) == [("replaced", "serial:C")]
    a = card(e, "serial:A")
    assert (a.state, a.node, a.pci_slot) == ("retired", "n1", SLOT_A)
    assert placements(e, "serial:A") == [("n1", SLOT_A, "GPU-A", day(0), day(5))]

    # A comes back from RMA into n3: linked to its history.
    assert apply(e, "n3", day(40), gpu("A", SLOT_B)) == [("returned", "serial:A")]
    a = card(e, "serial:A")
    assert (a.state, a.node, a.since.astimezone(UTC)) == ("in_service", "n3", day(40))
    with Session(e) as s:
        history = gpu_history(s, "A")
        assert history is not None
        assert [(x["kind"], x["card"]) for x in history["events"]] == [
            ("placed", "serial:A"), ("replaced", "serial:C"), ("returned", "serial:A")]
        returned = history["events"][-1]
        assert returned["previous_node"] == "n1" and "after it was replaced" in returned["reason"]
        assert [p["node"] for p in history["placements"]] == ["n1", "n3"]
        by_old_uuid = gpu_history(s, "GPU-B")
        assert by_old_uuid is not None and by_old_uuid["card"] == "serial:B"
        rows, total = list_gpus(s, GpuFilter())
        assert total == 4
        assert {(r["card"], r["node"], r["state"]) for r in rows} == {
            ("serial:A", "n3", "in_service"), ("serial:B", "n2", "in_service"), ("serial:C", "n1", "in_service"),
            ("serial:D", "n2", "in_service")}
        assert [r["card"] for r in list_gpus(s, GpuFilter(node="n2"))[0]] == ["serial:D", "serial:B"]
        assert list_gpus(s, GpuFilter(model="h100"))[1] == 4 and list_gpus(s, GpuFilter(state="retired"))[1] == 0


def test_a_card_listed_by_a_second_node_is_a_conflict_until_its_node_stops_listing_it(engine: sa.Engine) -> None:
    e = engine
    apply(e, "node-b", day(0), gpu("A", SLOT_A))
    apply(e, "node-a", day(0), gpu("Z", SLOT_A))
    # node-a's inventory claims node-b's card: it stays on node-b, in conflict, for an operator to see.
    assert apply(e, "node-a", day(0) + timedelta(minutes=5), gpu("Z", SLOT_A), gpu("A", SLOT_B)) == [
        ("conflict", "serial:A")]
    a = card(e, "serial:A")
    assert (a.node, a.pci_slot, a.state, a.claimed_by) == ("node-b", SLOT_A, "conflict", "node-a")
    assert a.last_seen.astimezone(UTC) == day(0)  # a claim is not a sighting by its node
    assert placements(e, "serial:A") == [("node-b", SLOT_A, "GPU-A", day(0), None)]
    with Session(e) as s:
        rows, _ = list_gpus(s, GpuFilter(state="conflict"))
        assert [(r["card"], r["node"], r["claimed_by"]) for r in rows] == [("serial:A", "node-b", "node-a")]
        history = gpu_history(s, "A")
        assert history is not None and history["claimed_by"] == "node-a"
        (conflict,) = [x for x in history["events"] if x["kind"] == "conflict"]
        assert conflict["node"] == "node-a" and conflict["previous_node"] == "node-b"
    # Both go on listing it: nothing new; node-b's listing is its card's last sighting.
    assert apply(e, "node-b", day(0) + timedelta(minutes=10), gpu("A", SLOT_A)) == []
    assert apply(e, "node-a", day(0) + timedelta(minutes=11), gpu("Z", SLOT_A), gpu("A", SLOT_B)) == []
    assert card(e, "serial:A").last_seen.astimezone(UTC) == day(0) + timedelta(minutes=10)
    # node-a stops: the conflict is over, the card in service on node-b.
    assert apply(e, "node-a", day(0) + timedelta(minutes=16), gpu("Z", SLOT_A)) == [("resolved", "serial:A")]
    a = card(e, "serial:A")
    assert (a.node, a.state, a.claimed_by) == ("node-b", "in_service", None)
    # Claimed again; then node-b stops listing it: missing there, and the next claim is a move.
    assert apply(e, "node-a", day(0) + timedelta(minutes=21), gpu("Z", SLOT_A), gpu("A", SLOT_B)) == [
        ("conflict", "serial:A")]
    assert apply(e, "node-b", day(0) + timedelta(minutes=25)) == [("missing", "serial:A")]
    assert card(e, "serial:A").state == "missing"
    assert apply(e, "node-a", day(0) + timedelta(minutes=26), gpu("Z", SLOT_A), gpu("A", SLOT_B)) == [
        ("moved", "serial:A")]
    a = card(e, "serial:A")
    assert (a.node, a.pci_slot, a.state, a.claimed_by) == ("node-a", SLOT_B, "in_service", None)


def test_a_driver_change_opens_a_new_placement_and_keeps_since(engine: sa.Engine) -> None:
    apply(engine, "n1", day(0), gpu("A", SLOT_A))
    assert apply(engine, "n1", day(1), gpu("A", SLOT_A, driver="570.86.15")) == [("changed", "serial:A")]
    assert [p[3:] for p in placements(engine, "serial:A")] == [(day(0), day(1)), (day(1), None)]
    assert card(engine, "serial:A").since.astimezone(UTC) == day(0)


def test_redelivered_or_late_inventories_change_nothing(engine: sa.Engine) -> None:
    apply(engine, "n1", day(0), gpu("A", SLOT_A))
    assert apply(engine, "n1", day(5), gpu("C", SLOT_A)) == [("replaced", "serial:C")]
    assert apply(engine, "n1", day(5), gpu("C", SLOT_A)) == []  # the same one again
    assert apply(engine, "n1", day(3), gpu("A", SLOT_A)) == []  # an older one, late
    with Session(engine) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(GpuLedgerEvent)) == 2
        assert s.scalar(sa.select(sa.func.count()).select_from(GpuPlacement)) == 2
    assert card(engine, "serial:A").state == "retired"


def test_rebuild_from_stored_inventories(engine: sa.Engine) -> None:
    def inventory(serials: list[str]) -> dict[str, object]:
        return {"driver_version": "550.127.05", "gpus": [
            {"index": i, "uuid": f"GPU-{sn}", "pci_bus_id": f"00000000:{0x18 + 0x23 * i:02X}:00.0", "serial": sn,
             "name": "NVIDIA A100-SXM4-80GB", "vbios_version": "92.00.45.00.05",
             "mig_devices": [{"uuid": f"MIG-{sn}-0", "index": 0, "gpu_instance_id": 1, "compute_instance_id": 0}]}
            for i, sn in enumerate(serials)]}

    with Session(engine) as s, s.begin():
        for n, (at, serials) in enumerate([(day(0), ["A", "B"]), (day(1), ["A", "B"]), (day(4), ["C", "B"])]):
            s.add(NodeState(node="n1", kind="inventory", record_id=f"inv:{n}", valid_from=at,
                            payload=inventory(serials)))
    with Session(engine) as s, s.begin():
        assert rebuild_ledger(s) == 3
    with Session(engine) as s, s.begin():
        assert rebuild_ledger(s) == 0  # nothing new
        assert rebuild_ledger(s, reset=True) == 3
    with Session(engine) as s:
        kinds = [k for (k,) in s.execute(sa.select(GpuLedgerEvent.kind).order_by(GpuLedgerEvent.id))]
        assert kinds == ["placed", "placed", "replaced"]
        history = gpu_history(s, "serial:B")
        assert history is not None
        (p,) = history["placements"]
        assert p["pci_slot"] == "0000:3b:00.0" and p["vbios"] == "92.00.45.00.05" and p["driver"] == "550.127.05"
        assert p["mig_layout"] == ["MIG-B-0 gi1/ci0"]
        assert history["model"] == "NVIDIA A100-SXM4-80GB"
    with Session(engine) as s, s.begin():
        assert apply_inventory_payload(s, "n1", day(9), inventory(["C"]))[0].kind == "missing"
        gpus: Any = inventory(["Z"])["gpus"]  # the record's GPUs as published, with the node's driver
        (placed,) = apply_inventory(s, "n2", day(9), gpus, driver="570.86.15")
        assert (placed.kind, placed.card, placed.pci_slot) == ("placed", "serial:Z", "0000:18:00.0")
        assert s.scalars(sa.select(GpuPlacement.driver).where(GpuPlacement.card == "serial:Z")).one() == "570.86.15"
