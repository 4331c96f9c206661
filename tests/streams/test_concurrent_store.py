"""Two workers' transactions changing one incident at once, on a real PostgreSQL: neither change is lost.

A workload incident gathers faults read from several partitions, a fleet incident faults of many
nodes, so two workers change the same row at once. One worker's transaction is held just before
its commit, holding the row it updated; the other worker's transaction on the same incident must
wait for it and then count both (`history.incident_rows.lock_open`), not write back what it read
before the first one committed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from models.node_records import NodeRecord
from models.stream_policy import PipelinePolicy
from streams.items import Item, ItemMapper
from streams.store import Store
from tests import store_reads
from tests.polling import poll
from tests.streams.records import T0, Kmsg, inventory, pods, processes, s

WAIT_S = 60.0  # generous on a loaded machine; the test waits on events, never sleeps its way through


def _items(records: list[NodeRecord]) -> list[Item]:
    mapper = ItemMapper()
    out: list[Item] = [i for r in records for i in mapper.items(r, "topic")]
    return out + mapper.flush_all()


@pytest.fixture
def stores(postgres_database: str) -> Iterator[tuple[Store, Store]]:
    policy = PipelinePolicy(fleet_min_nodes=2)
    first, second = Store(postgres_database, policy, cluster="c1"), Store(postgres_database, policy, cluster="c1")
    first.create_schema()
    yield first, second
    first.dispose()
    second.dispose()


def _waiting_on_a_lock(url: str) -> bool:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return bool(conn.execute(sa.text("SELECT count(*) FROM pg_locks WHERE NOT granted")).scalar())
    finally:
        engine.dispose()


def _race(held: Store, other: Store, held_items: list[Item], other_items: list[Item], url: str) -> None:
    """`held` stores its items in a transaction kept open at its commit until `other`'s transaction
    waits on a lock; then both finish."""
    at_commit, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold(*_: Any) -> None:
        if not at_commit.is_set():  # the first transaction's commit only
            at_commit.set()
            release.wait(WAIT_S)

    def run(store: Store, items: list[Item]) -> None:
        try:
            store.process(items)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    sa.event.listen(held.engine, "commit", hold)
    first = threading.Thread(target=run, args=(held, held_items))
    first.start()
    try:
        assert at_commit.wait(WAIT_S), "the first transaction reached its commit"
        second = threading.Thread(target=run, args=(other, other_items))
        second.start()
        poll("the second transaction to wait for the first",
             lambda: _waiting_on_a_lock(url) or (not second.is_alive() and "ended"), WAIT_S, interval=0.05)
        assert second.is_alive(), "the second transaction waits for the first"
    finally:
        release.set()
        first.join(WAIT_S)
        sa.event.remove(held.engine, "commit", hold)
    second.join(WAIT_S)
    assert not errors, errors


def _app_fault(node: str, i: int) -> list[NodeRecord]:
    """A fault of workload ml/burst/main on `node` (its inventory, pod and process first)."""
    return [inventory(node, T0 - s(600)), pods(node, T0 - s(300), {0: ("ml", f"burst-7d9f8c6b5-{i:05d}", "main")}),
            processes(node, T0 - s(290), {4000 + i: 0}),
            Kmsg(node).xid(0, 13, T0 + s(10 + i), 4000 + i, "pt_main_thread",
                           text="Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): Out Of Range Address")]


def test_a_workload_incident_counts_the_faults_of_two_workers_at_once(stores: tuple[Store, Store],
                                                                      postgres_database: str) -> None:
    one, two = stores
    one.process(_items(_app_fault("w-0", 0)))
    _race(one, two, _items(_app_fault("w-1", 1)), _items(_app_fault("w-2", 2)), postgres_database)
    (workload,) = [i for i in store_reads.incidents(one) if i["component"] == "workload"]
    assert workload["count"] == 3, workload
    assert sorted(e["node"] for e in store_reads.fault_events(one)) == ["w-0", "w-1", "w-2"]
    assert {e["incident_id"] for e in store_reads.fault_events(one)} == {workload["incident_id"]}


def test_a_fleet_incident_keeps_the_nodes_of_two_workers_at_once(stores: tuple[Store, Store],
                                                                 postgres_database: str) -> None:
    one, two = stores

    def lost(node: str, n: int) -> list[Item]:
        return _items([inventory(node, T0 - s(600)), Kmsg(node).xid(0, 79, T0 + s(10 + n), text="GPU has fallen "
                                                                           "off the bus.")])

    one.process(lost("rack-0", 0) + lost("rack-1", 1))
    (fleet,) = store_reads.fleet_incidents(one)
    assert fleet["nodes"] == ["rack-0", "rack-1"]
    _race(one, two, lost("rack-2", 2), lost("rack-3", 3), postgres_database)
    (fleet,) = store_reads.fleet_incidents(one)
    assert fleet["nodes"] == ["rack-0", "rack-1", "rack-2", "rack-3"] and fleet["count"] == 4, fleet
