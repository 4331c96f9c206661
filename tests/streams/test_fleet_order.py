"""A fleet incident takes every node of its family within its reach, whatever order the faults are
read in: one worker reading partitions out of event-time order, or several workers at once.

The faults (Xid 79, family gpu_lost; fleet window 600 s, three nodes) in event time:

    e +100 | a +500, b +510 | c +900 | l +1400 | f +2600

The windows [100, 700] (e, a, b) and [500, 1100] (a, b, c) hold three nodes: a burst. e is earlier
than the last fault of the batch that may open it, l later than it but within a fleet window of c,
so both belong to it. f is more than a window after l: it belongs to nothing. Every read order (one
batch per `Store.process`) must make the same one incident over e, a, b, c and l.
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from models.node_records import NodeRecord
from models.stream_policy import PipelinePolicy
from streams.items import Item, ItemMapper
from streams.store import Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, s
from tests.streams.test_concurrent_store import _race

FAULTS = {"e": 100, "a": 500, "b": 510, "c": 900, "l": 1400, "f": 2600}  # node: seconds after T0
MEMBERS = ["a", "b", "c", "e", "l"]


def _records(node: str) -> list[NodeRecord]:
    return [inventory(node, T0 - s(600)), Kmsg(node).xid(0, 79, T0 + s(FAULTS[node]), text="GPU has fallen off "
                                                                                         "the bus.")]


def _items(nodes: list[str]) -> list[Item]:
    mapper = ItemMapper()
    items = [i for node in nodes for r in _records(node) for i in mapper.items(r, "topic")]
    return items + mapper.flush_all()


def _shuffled(seed: int) -> list[list[str]]:
    """All the nodes in a random order, cut into random batches."""
    rnd = random.Random(seed)
    nodes = list(FAULTS)
    rnd.shuffle(nodes)
    cuts = sorted(rnd.sample(range(1, len(nodes)), rnd.randint(1, 3)))
    return [nodes[i:j] for i, j in zip([0, *cuts], [*cuts, len(nodes)], strict=True)]


ORDERS = {
    "event time, a node a batch": [["e"], ["a"], ["b"], ["c"], ["l"], ["f"]],
    "early and late nodes first, below the threshold": [["l"], ["e"], ["a", "b", "c"], ["f"]],
    "the opening batch first, the early node after": [["a", "b", "c"], ["e"], ["f"], ["l"]],
    "latest first": [["f"], ["l"], ["c"], ["b"], ["a"], ["e"]],
    "mixed batches": [["c", "l"], ["f", "e"], ["a", "b"]],
    **{f"shuffled {seed}": _shuffled(seed) for seed in range(4)},
}


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'order.db'}"
    return str(request.getfixturevalue("postgres_database"))


def _store(url: str, min_nodes: int = 3) -> Store:
    st = Store(url, PipelinePolicy(fleet_min_nodes=min_nodes, fleet_window_s=600), cluster="c1")
    st.create_schema()
    return st


def _opened(results: list[Any]) -> list[tuple[str, str]]:
    return [(m["incident"]["component_id"], m["change"]) for r in results for o in r.outgoing if o.key == "c1"
            for m in [o.payload] if m.get("change") in ("opened", "reopened", "resolved")]


@pytest.mark.parametrize("order", list(ORDERS))
def test_every_read_order_makes_the_same_fleet_incident(url: str, order: str) -> None:
    batches = ORDERS[order]
    assert sorted(n for b in batches for n in b) == sorted(FAULTS)
    store = _store(url)
    try:
        results = [store.process(_items(batch)) for batch in batches]
        (fleet,) = store_reads.fleet_incidents(store)
        assert _opened(results) == [("gpu_lost", "opened")]
        assert (fleet["status"], fleet["nodes"], fleet["count"], fleet["codes"]) == ("open", MEMBERS, 5, ["Xid 79"])
        assert (fleet["first_seen"], fleet["last_seen"]) == ((T0 + s(100)).isoformat(), (T0 + s(1400)).isoformat())
        assert "5 nodes" in fleet["reason"]
    finally:
        store.dispose()


def test_a_far_burst_of_its_own_opens_a_new_incident(url: str) -> None:
    """Faults more than a window after the incident's last fault are none of it: with enough nodes,
    they are a new burst (the first one resolved), whichever is read first of the far nodes."""
    store = _store(url)
    try:
        store.process(_items(["a", "b", "c"]))
        far = [inventory(n, T0 - s(600)) for n in ("x", "y")]
        far += [Kmsg(n).xid(0, 79, T0 + s(3000 + i), text="GPU has fallen off the bus.") for i, n in enumerate("xy")]
        mapper = ItemMapper()
        store.process([i for r in far for i in mapper.items(r, "topic")] + mapper.flush_all())
        store.process(_items(["f"]))
        first, second = store_reads.fleet_incidents(store)
        assert (first["status"], first["nodes"]) == ("resolved", ["a", "b", "c"])
        assert (second["status"], second["nodes"], second["count"]) == ("open", ["f", "x", "y"], 3)
        assert second["previous_incident_id"] == first["incident_id"]
    finally:
        store.dispose()


def _at(node: str) -> datetime:
    return T0 + s(FAULTS[node])


def test_two_workers_below_the_threshold_each_open_it_together(postgres_database: str) -> None:
    """Two workers each store one node's fault before either commits: each alone counts two nodes of
    three, so the later count must wait for the earlier transaction and read its fault."""
    one, two = _store(postgres_database), _store(postgres_database)
    try:
        one.process(_items(["a"]))
        _race(one, two, _items(["b"]), _items(["c"]), postgres_database)
        (fleet,) = store_reads.fleet_incidents(one)
        assert (fleet["nodes"], fleet["count"]) == (["a", "b", "c"], 3), fleet
        assert fleet["first_seen"] == _at("a").isoformat() and fleet["last_seen"] == _at("c").isoformat()
    finally:
        one.dispose()
        two.dispose()


def test_the_burst_around_faults_depends_on_the_faults_only() -> None:
    """`fleet_bursts_around` as a pure function: the same faults in any order give the same bursts, and
    only windows that hold one of the faults asked about count."""
    from models.fleet import FleetFault, fleet_bursts_around

    policy = PipelinePolicy(fleet_min_nodes=3, fleet_window_s=600)
    faults = [FleetFault(n, "Xid 79", _at(n)) for n in FAULTS]
    bursts = set()
    for seed in range(5):
        random.Random(seed).shuffle(faults)
        bursts.add(tuple(fleet_bursts_around("gpu_lost", faults, [_at("e")], policy)))
    (found,) = bursts
    # Around e: the window [100, 700] (e, a, b); c's windows do not hold e.
    (burst,) = found
    assert (burst.nodes, burst.first, burst.last) == (("a", "b", "e"), _at("e"), _at("b"))
    (around_b,) = fleet_bursts_around("gpu_lost", faults, [_at("b")], policy)
    assert around_b.nodes == ("a", "b", "c", "e")
    # l's windows hold c and l only, f's f alone: no burst around them, though a, b, c make one nearby.
    assert fleet_bursts_around("gpu_lost", faults, [_at("l"), _at("f")], policy) == []
    assert fleet_bursts_around("application", faults, [_at("a")], policy) == []  # no fleet family


def test_bursts_more_than_a_fleet_window_apart_are_separate_whatever_batch_reads_them() -> None:
    """Two bursts hours apart, read in one batch, are two bursts (one batch may hold hours of event time)."""
    from models.fleet import FleetFault, fleet_bursts_around

    policy = PipelinePolicy(fleet_min_nodes=3, fleet_window_s=600)
    early = [FleetFault(n, "Xid 94", T0 + s(60 * k)) for k, n in enumerate("abc")]
    late = [FleetFault(n, "Xid 94", T0 + s(7200 + 60 * k)) for k, n in enumerate("def")]
    bursts = fleet_bursts_around("memory", [*late, *early], [f.at for f in [*early, *late]], policy)
    assert [(b.nodes, b.first, b.last) for b in bursts] == [
        (("a", "b", "c"), T0, T0 + s(120)), (("d", "e", "f"), T0 + s(7200), T0 + s(7320))]


@pytest.mark.parametrize("order", ["event time", "late burst first", "one batch"])
def test_two_bursts_are_two_incidents_in_any_order(url: str, order: str) -> None:
    """A burst and another two hours later are two incidents, the first over (resolved a fleet window
    after its last fault), whether they are read in event time, the later first (a node whose records
    came late), or in one batch."""
    store = _store(url)
    early, late = ["a", "b", "c"], ["e", "f", "l"]
    times = {n: T0 + s(60 * k) for k, n in enumerate(early)} | {n: T0 + s(7200 + 60 * k) for k, n in enumerate(late)}

    def items(nodes: list[str]) -> list[Item]:
        mapper = ItemMapper()
        recs = [r for n in nodes for r in (inventory(n, T0 - s(600)), Kmsg(n).xid(0, 79, times[n],
                                                                                   text="GPU has fallen off the bus."))]
        return [i for r in recs for i in mapper.items(r, "topic")] + mapper.flush_all()

    batches = {"event time": [early, late], "late burst first": [late, early], "one batch": [early + late]}[order]
    try:
        for batch in batches:
            store.process(items(batch))
        first, second = sorted(store_reads.fleet_incidents(store), key=lambda i: i["first_seen"])
        assert (first["nodes"], first["status"]) == (early, "resolved")
        assert first["resolved_at"] == (times["c"] + s(600)).isoformat()
        assert (second["nodes"], second["status"]) == (late, "open")
    finally:
        store.dispose()


def test_a_long_burst_is_the_same_incident_however_read_and_each_count_reads_only_its_growth(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A family faulting on many nodes for an hour is one long fleet incident. Read in event time, a
    count reads from SQL only where the incident's reach grows past its stored one (this batch's faults
    it has at hand), never its whole reach nor two fleet windows of faults: what it reads stays small
    however long the incident runs, and the incident is the one a single batch or a shuffled read makes."""
    import streams.fleet

    nodes = [f"n{i:02d}" for i in range(12)]
    times = {n: [T0 + s(40 * k + 3 * i) for k in range(i % 3, 90, 3)] for i, n in enumerate(nodes)}  # an hour

    def items(batch: list[tuple[str, datetime]]) -> list[Item]:
        mapper = ItemMapper()
        recs: list[NodeRecord] = [inventory(n, T0 - s(600)) for n in sorted({n for n, _ in batch})]
        recs += [Kmsg(n, seq=int((at - T0).total_seconds())).xid(0, 79, at, text="GPU has fallen off the bus.")
                 for n, at in batch]  # one kmsg record each
        return [i for r in recs for i in mapper.items(r, "topic")] + mapper.flush_all()

    faults = sorted(((n, at) for n in nodes for at in times[n]), key=lambda f: f[1])
    read: list[float] = []
    real = streams.fleet.fleet_faults

    def counted(s_: Any, family: str, spans: Any) -> Any:
        read.append(sum((hi - lo).total_seconds() for lo, hi in spans))
        return real(s_, family, spans)

    def incident(batches: list[list[tuple[str, datetime]]]) -> tuple[Any, ...]:
        store = _store(url)
        try:
            for batch in batches:
                store.process(items(batch))
            (fleet,) = store_reads.fleet_incidents(store)
            return fleet["status"], fleet["nodes"], fleet["count"], fleet["first_seen"], fleet["last_seen"]
        finally:
            store.dispose()

    monkeypatch.setattr(streams.fleet, "fleet_faults", counted)
    in_order = incident([faults[i:i + 10] for i in range(0, len(faults), 10)])
    late_reads = read[len(read) // 2:]  # the incident has run for half an hour by then
    assert in_order == ("open", nodes, 12, T0.isoformat(), faults[-1][1].isoformat())
    assert max(late_reads) < 600, late_reads  # never a window's worth, let alone the reach (over an hour)
    shuffled = list(faults)
    random.Random(5).shuffle(shuffled)
    assert incident([faults]) == in_order
    assert incident([shuffled[i:i + 50] for i in range(0, len(shuffled), 50)]) == in_order
