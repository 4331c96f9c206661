"""The action record and the breaker state: JSON Lines, SQLite and PostgreSQL behave the same."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from history.engine import make_engine
from history.migrate import upgrade
from models.cordon import BreakerState
from respond.cordon.action_log import ActionRecord, ActionStore, JsonlActionStore, SqlActionStore

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


StoreFactory = Callable[[], ActionStore]


@pytest.fixture(params=["jsonl", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A callable opening the store again (a restarted worker sees what the last one wrote)."""
    opened: list[SqlActionStore] = []
    if request.param == "jsonl":
        yield lambda: JsonlActionStore(tmp_path / "actions.jsonl")
        return
    url = f"sqlite:///{tmp_path / 'actions.db'}" if request.param == "sqlite" \
        else request.getfixturevalue("postgres_database")
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()

    def open_sql() -> SqlActionStore:
        store = SqlActionStore(make_engine(url))
        opened.append(store)
        return store

    yield open_sql
    for store in opened:
        store.close()


def test_records_round_trip_and_recent_cordons_are_counted(store_factory: StoreFactory) -> None:
    store = store_factory()
    rows = [
        ActionRecord(at=T0 - timedelta(minutes=90), action="cordon", outcome="done", node="a", incident_id="i1"),
        ActionRecord(at=T0 - timedelta(minutes=30), action="cordon", outcome="done", node="b", incident_id="i2",
                     reason="rule gpu-lost", details={"changes": ["taint", "event"]}),
        ActionRecord(at=T0 - timedelta(minutes=20), action="cordon", outcome="skipped", node="c"),
        ActionRecord(at=T0 - timedelta(minutes=10), action="release", outcome="done", node="b", actor="alice"),
        ActionRecord(at=T0 - timedelta(minutes=5), action="cordon", outcome="dry_run", node="d", dry_run=True),
    ]
    for row in rows:
        store.record(row)

    again = store_factory()
    assert again.cordons_since(T0 - timedelta(hours=1)) == 1
    assert again.cordons_since(T0 - timedelta(hours=2)) == 2
    assert again.recent(10) == rows
    assert again.recent(2) == rows[-2:]


def test_breaker_state_survives_a_restart(store_factory: StoreFactory) -> None:
    store = store_factory()
    assert store.breaker() == BreakerState()
    tripped = BreakerState(tripped=True, tripped_at=T0, reason="pool 'a' has 2 of 10 nodes cordoned", pool="a")

    store.set_breaker(tripped)
    assert store_factory().breaker() == tripped

    reset = BreakerState(reset_at=T0 + timedelta(hours=1), reset_by="ops", reset_reason="driver rolled back")
    store.set_breaker(reset)
    assert store_factory().breaker() == reset


def test_a_steps_done_record_is_found_by_its_key_for_its_cordon_only(store_factory: StoreFactory) -> None:
    store = store_factory()
    first, second = (T0 - timedelta(hours=2)).isoformat(), T0.isoformat()
    mark = {"key": "n1/inc-1", "cordoned_at": first}
    store.record(ActionRecord(action="mark", outcome="done", node="n1", incident_id="inc-1", details=mark))
    store.record(ActionRecord(action="mark", outcome="failed", node="n1", incident_id="inc-1",
                              details={**mark, "cordoned_at": second}))
    store.record(ActionRecord(action="evict", outcome="done", node="n1", incident_id="inc-1", details=mark))

    again = store_factory()
    assert again.step_recorded("mark", "n1", "n1/inc-1", first)
    assert not again.step_recorded("mark", "n1", "n1/inc-1", second)  # failed for the later cordon: not done
    assert not again.step_recorded("mark", "n2", "n1/inc-1", first)  # another node
    assert not again.step_recorded("mark", "n1", "n1/inc-2", first)  # another key
    assert again.step_recorded("evict", "n1", "n1/inc-1", first)
    assert not again.step_recorded("label", "n1", "n1/inc-1", first)  # another step
