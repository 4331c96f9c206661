"""The remediation loops in SQL (`history.remediation_store`): one loop per cordon, each change a
compare-and-set on its version with its transition, attempts reserved once, the budgets' history,
the transitions told once, RMAs closed by the ledger, the reliability inputs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.ledger_store import apply_inventory
from history.migrate import upgrade
from history.remediation_store import LoopRow, RemediationStore, Reservation, loop_dict
from history.rma import record_ledger_event
from history.tables import GpuLedgerEvent, Incident
from models.ledger import GpuSighting

T = datetime(2026, 12, 1, 12, tzinfo=UTC)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[RemediationStore]:
    engine = make_engine(f"sqlite:///{tmp_path / 'h.db'}")
    upgrade(engine)
    yield RemediationStore(engine)
    engine.dispose()


def loop(loop_id: str = "rl-1", node: str = "n1", card: str = "serial:A", **kw: object) -> LoopRow:
    fields: dict[str, object] = {
        "loop_id": loop_id, "incident_id": f"inc-{loop_id}", "node": node, "gpu": "GPU-1", "card": card, "pool": "p",
        "family": "gpu_lost", "cordoned_at": T.isoformat(), "stage": "queued", "reason": "opened", "opened_at": T,
        "stage_since": T, "updated_at": T, "deadline_at": T + timedelta(hours=4), "details": {"pci": "0000:18:00.0"}}
    fields.update(kw)
    return LoopRow(**fields)  # type: ignore[arg-type]


def test_one_loop_per_cordon_and_each_change_lands_once(store: RemediationStore) -> None:
    first, opened = store.open(loop())
    again, reopened = store.open(loop(reason="a redelivery"))
    assert opened and not reopened and again.reason == "opened"
    moved = store.change(first, stage="evidence", reason="admitted", at=T, attempt=1)
    assert moved is not None and (moved.stage, moved.version, moved.attempt) == ("evidence", 2, 1)
    assert store.change(first, stage="manual", reason="a stale writer") is None  # its version moved
    assert [(t.seq, t.from_stage, t.to_stage) for t in store.transitions("rl-1")] == [
        (1, None, "queued"), (2, "queued", "evidence")]
    assert store.in_flight() == 1 and store.in_flight("p") == 1 and store.in_flight("q") == 0


def test_an_attempt_is_reserved_with_its_change_and_only_once(store: RemediationStore) -> None:
    lp, _ = store.open(loop(stage="executing", remedy="reboot_node", attempt=1))
    reservation = Reservation("reboot_node", 1, "job", "xidpipe-reboot-1", {"boot_id_before": "b1"})
    reserved = store.change(lp, reason="reserved", reserve=reservation)
    assert reserved is not None
    assert store.change(reserved, reason="again", reserve=reservation) is None  # the same attempt: refused whole
    assert store.get("rl-1").reason == "reserved"  # type: ignore[union-attr]
    store.finish("rl-1", "reboot_node", 1, "succeeded", "rebooted", at=T)
    store.finish("rl-1", "reboot_node", 1, "failed", "a late second opinion", at=T)  # the first outcome stays
    store.validated("rl-1", "reboot_node", 1, "passed")
    [attempt] = store.attempts("rl-1")
    assert (attempt.outcome, attempt.reason, attempt.validated) == ("succeeded", "rebooted", "passed")


def test_the_budgets_history_is_the_nodes_and_the_cards_resets_and_reboots(store: RemediationStore) -> None:
    for lid, node, card, kind in (("rl-a", "n1", "serial:A", "reboot_node"), ("rl-b", "n2", "serial:A", "reset_gpu"),
                                  ("rl-c", "n1", "serial:B", "validation"), ("rl-d", "n3", "serial:C", "reboot_node")):
        lp, _ = store.open(loop(lid, node, card))
        store.change(lp, reserve=Reservation(kind, 1, "job", f"job-{lid}"), at=T)
    history = store.history("n1", "serial:A", T - timedelta(days=1))
    assert sorted((a.loop_id, a.remedy) for a in history) == [("rl-a", "reboot_node"), ("rl-b", "reset_gpu")]
    assert store.history("n1", "serial:A", T + timedelta(days=1)) == []


def test_operator_requests_and_finding_a_loop(store: RemediationStore) -> None:
    store.open(loop("rl-0123456789"))
    assert store.find("rl-0123").loop_id == "rl-0123456789"  # type: ignore[union-attr]
    assert store.find("inc-rl-0123456789").loop_id == "rl-0123456789"  # type: ignore[union-attr]
    paused = store.request("rl-0123456789", paused=True, by="alice")
    assert paused is not None and paused.paused and store.due() == []
    cancel = store.request("rl-0123456789", by="bob", cancel="vendor swap")
    assert cancel is not None and not cancel.paused and cancel.cancel_requested == "cancelled by bob: vendor swap"
    assert [lp.loop_id for lp in store.due()] == ["rl-0123456789"]


def test_transitions_are_told_once(store: RemediationStore) -> None:
    lp, _ = store.open(loop())
    store.change(lp, stage="evidence", reason="admitted")
    untold = store.untold()
    assert [t.to_stage for t in untold] == ["queued", "evidence"]
    store.told([untold[0].id], T)
    assert [t.to_stage for t in store.untold()] == ["evidence"]


def test_an_rma_closes_when_a_new_card_takes_the_slot_and_ledger_events_are_once_per_loop(
        store: RemediationStore) -> None:
    with Session(store.engine) as s:
        apply_inventory(s, "n1", T - timedelta(days=1), [GpuSighting("GPU-1", "0000:18:00.0", "A")])
        s.commit()
    lp, _ = store.open(loop(stage="rma"))
    assert store.open_rma(lp, "0000:18:00.0", "Xid 64", T) and not store.open_rma(lp, "0000:18:00.0", "again", T)
    assert record_ledger_event(store.engine, lp, "rma", "Xid 64", T)
    assert not record_ledger_event(store.engine, lp, "rma", "Xid 64", T)  # after a crash: not twice
    [open_rma] = store.rmas(open_only=True)
    assert open_rma["card"] == "serial:A"
    with Session(store.engine) as s:
        apply_inventory(s, "n1", T + timedelta(days=3), [GpuSighting("GPU-9", "0000:18:00.0", "Z")])
        s.commit()
        kinds = [e.kind for e in s.scalars(sa.select(GpuLedgerEvent).order_by(GpuLedgerEvent.id))]
    assert kinds == ["placed", "rma", "replaced"]
    assert store.rmas(open_only=True) == []
    [closed] = store.rmas()
    assert closed["replaced_by"] == "serial:Z" and "now holds serial:Z" in closed["close_reason"]


def test_reliability_inputs_and_the_loops_view(store: RemediationStore) -> None:
    with Session(store.engine) as s:
        for i, (node, serial, hours) in enumerate((("n1", "A", 0), ("n1", "A", 10), ("n2", None, 5))):
            s.add(Incident(incident_id=f"inc-rl-{i}", fingerprint=f"f{i}", node=node, gpu="GPU-1", family="gpu_lost",
                           status="open", category="hardware", reason="r", count=1,
                           first_seen=T + timedelta(hours=hours), last_seen=T, opened_at=T, updated_at=T,
                           gpu_uuid="GPU-1", serial=serial, codes=[], pods=[], processes=[], workloads=[],
                           component="gpu"))
        s.commit()
    lp, _ = store.open(loop("rl-0"))
    store.change(lp, stage="returned", reason="validated", at=T + timedelta(hours=2))
    assert store.repairs(T - timedelta(days=1)) == [("n1", "serial:A", T, T + timedelta(hours=2))]
    nodes, cards = store.incident_starts(T - timedelta(days=1))
    assert sorted(nodes) == ["n1", "n2"] and len(nodes["n1"]) == 2 and sorted(cards) == ["serial:A", "uuid:GPU-1"]
    shown = loop_dict(store.get("rl-0"), now=T)  # type: ignore[arg-type]
    assert shown["final"] and not shown["stuck"] and "cluster_evidence" not in shown["details"]
