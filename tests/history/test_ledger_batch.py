"""The GPU ledger applied a batch of inventories at once (`apply_inventories`, what the stream does
per transaction) leaves the ledger exactly as applying them one by one does, and loads what the
inventories of distinct nodes touch in a few queries."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.ledger_store import apply_inventories, apply_inventory_payload
from history.migrate import upgrade
from history.tables import GpuCard, GpuLedgerEvent, GpuLedgerNode, GpuPlacement

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MIN = timedelta(minutes=1)
Inventory = tuple[str, datetime, dict[str, Any]]


def day(n: int) -> datetime:
    return T0 + timedelta(days=n)


def inv(node: str, at: datetime, *serials: str, driver: str = "550.127.05") -> Inventory:
    return node, at, {"driver_version": driver, "gpus": [
        {"index": i, "uuid": f"GPU-{sn}", "pci_bus_id": f"00000000:{0x18 + 0x23 * i:02X}:00.0", "serial": sn,
         "name": "NVIDIA H100 80GB HBM3"} for i, sn in enumerate(serials)]}


# Batches, each one transaction: distinct nodes and cards (loaded at once); a card moving from one
# listed node to another in the same batch, a node twice (one by one); a late inventory among new
# ones; a card back from repair on a node of its own batch; a driver change and a swap.
BATCHES: list[list[Inventory]] = [
    [inv("n1", day(0), "A", "B"), inv("n2", day(0), "C", "D"), inv("n3", day(0), "E")],
    [inv("n1", day(1), "A"), inv("n2", day(1), "C", "D"), inv("n3", day(1), "E", "B")],
    [inv("n1", day(0), "A", "B"), inv("n2", day(2), "C", "D", driver="570.86.15"), inv("n3", day(2), "E")],
    [inv("n1", day(3), "F"), inv("n1", day(4), "F", "G"), inv("n2", day(4), "C", "D")],
    [inv("n4", day(5), "A"), inv("n2", day(5), "X", "D"), inv("n3", day(5), "E", "B")],
    # n5 claims n2's card D while n2 lists it (a conflict), stops (resolved, n2 in the batch), claims it again,
    # n2 stops listing it (missing), and n5's next claim is a move.
    [inv("n2", day(6), "X", "D"), inv("n3", day(6), "E", "B")],
    [inv("n5", day(6) + MIN * 10, "D"), inv("n1", day(6) + MIN * 10, "F", "G")],
    [inv("n5", day(6) + MIN * 20), inv("n2", day(6) + MIN * 20, "X", "D")],
    [inv("n5", day(6) + MIN * 30, "D"), inv("n3", day(6) + MIN * 30, "E", "B")],
    [inv("n2", day(6) + MIN * 40, "X"), inv("n1", day(6) + MIN * 40, "F", "G")],
    [inv("n5", day(6) + MIN * 50, "D"), inv("n3", day(6) + MIN * 50, "E", "B")],
]


def snapshot(e: sa.Engine) -> dict[str, Any]:
    """The ledger's content without row ids."""
    def utc(v: datetime | None) -> datetime | None:
        return v.astimezone(UTC) if v is not None and v.tzinfo else v.replace(tzinfo=UTC) if v else None

    with Session(e) as s:
        return {
            "cards": sorted((c.card, c.state, c.node, c.pci_slot, utc(c.since), utc(c.first_seen), utc(c.last_seen),
                             utc(c.missing_since), c.claimed_by) for c in s.scalars(sa.select(GpuCard))),
            "placements": sorted((p.card, p.node, p.pci_slot, p.driver, utc(p.valid_from), utc(p.valid_to))
                                 for p in s.scalars(sa.select(GpuPlacement))),
            "events": [(v.kind, v.card, v.node, utc(v.at), v.previous_card, v.previous_node) for v in s.scalars(
                sa.select(GpuLedgerEvent).order_by(GpuLedgerEvent.id))],
            "marks": sorted((m.node, utc(m.inventory_at)) for m in s.scalars(sa.select(GpuLedgerNode))),
        }


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[sa.Engine, sa.Engine]]:
    pair = (make_engine(f"sqlite:///{tmp_path / 'one.db'}"), make_engine(f"sqlite:///{tmp_path / 'batch.db'}"))
    for e in pair:
        upgrade(e)
    yield pair
    for e in pair:
        e.dispose()


def test_a_batch_leaves_the_ledger_as_one_by_one(engines: tuple[sa.Engine, sa.Engine]) -> None:
    one, batch = engines
    for inventories in BATCHES:
        with Session(one) as s, s.begin():
            expected = sum(len(apply_inventory_payload(s, node, at, payload)) for node, at, payload in inventories)
        with Session(batch) as s, s.begin():
            assert apply_inventories(s, inventories) == expected
        assert snapshot(batch) == snapshot(one)
    final = snapshot(batch)
    assert ("serial:A", "n4") in {(p[0], p[1]) for p in final["placements"] if p[5] is None}  # back, elsewhere
    assert {e[0] for e in final["events"]} >= {"placed", "missing", "moved", "replaced", "conflict", "resolved"}
    assert ("serial:D", "n5") in {(p[0], p[1]) for p in final["placements"] if p[5] is None}


def test_distinct_nodes_are_loaded_in_a_few_queries(engines: tuple[sa.Engine, sa.Engine]) -> None:
    e = engines[1]
    fleet = [inv(f"n{i}", day(0), f"S{i}a", f"S{i}b") for i in range(20)]
    selects: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)

    sa.event.listen(e, "before_cursor_execute", count)
    try:
        for at in (day(0), day(1)):  # the first inventories, then the periodic ones
            selects.clear()
            with Session(e) as s, s.begin():
                apply_inventories(s, [(node, at, payload) for node, _, payload in fleet])
            assert len(selects) <= 4
    finally:
        sa.event.remove(e, "before_cursor_execute", count)
    with Session(e) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(GpuPlacement)) == 40
        assert all(c.last_seen.replace(tzinfo=UTC) == day(1) for c in s.scalars(sa.select(GpuCard)))
