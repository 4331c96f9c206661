"""A batch's reads of the incidents do not grow with its faults: the incidents its reports can join
are read together (`RowLookup.prefetch`), not one query per report."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from models.node_records import NodeRecord
from models.stream_policy import PipelinePolicy
from streams.items import Item
from streams.store import Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, items_of, pods, processes, s

GPUS = 4


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store(f"sqlite:///{tmp_path / 'q.db'}", PipelinePolicy(quiet_period_s=600, fleet_min_nodes=10_000))
    st.create_schema()
    yield st
    st.dispose()



def state(nodes: list[str]) -> list[NodeRecord]:
    out: list[NodeRecord] = []
    for n in nodes:
        out += [inventory(n, T0, gpus=GPUS),
                pods(n, T0 + s(1), {g: (f"team-{n}", f"job-{n}-7d9f8c6b5-abcde", "main") for g in range(GPUS)}),
                processes(n, T0 + s(2), {4000 + g: g for g in range(GPUS)})]
    return out


def faults(kmsg: dict[str, Kmsg], nodes: list[str], at: float) -> list[NodeRecord]:
    """On every GPU: an application Xid of its job (the node's workload incident) and a hardware Xid (the GPU's)."""
    out: list[NodeRecord] = []
    for n in nodes:
        k = kmsg.setdefault(n, Kmsg(n))
        out += [*k.identity(0, T0 + s(at))]
        for g in range(GPUS):
            out += [k.xid(g, 13, T0 + s(at + 0.1 * g), 4000 + g, "python3"), k.xid(g, 94, T0 + s(at + 0.1 * g + 0.05))]
    return out


def incident_reads(store: Store, items: list[Item]) -> int:
    reads: list[str] = []

    def note(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        text = " ".join(statement.split()).upper()
        if text.startswith("SELECT") and "FROM INCIDENTS" in text:
            reads.append(text)

    sa.event.listen(store.engine, "before_cursor_execute", note)
    try:
        store.process(items)
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", note)
    return len(reads)


@pytest.mark.parametrize("nodes", [3, 12])
def test_the_incidents_a_batch_joins_are_read_together(store: Store, nodes: int) -> None:
    names = [f"q{i:02d}" for i in range(nodes)]
    kmsg: dict[str, Kmsg] = {}
    store.process(items_of(state(names)))
    opening = incident_reads(store, items_of(faults(kmsg, names, 10)))
    incidents = store_reads.incidents(store)
    assert len(incidents) == nodes * (GPUS + 1)  # per GPU its own, per node its job's (a workload)
    joining = incident_reads(store, items_of(faults(kmsg, names, 400)))  # the same components again: they join
    assert len(store_reads.incidents(store)) == len(incidents)
    counts = sorted(i["count"] for i in store_reads.incidents(store))
    assert counts == [2] * nodes * GPUS + [2 * GPUS] * nodes
    # Reads per transaction that do not depend on how many nodes and GPUs the batch spans.
    assert opening <= 12 and joining <= 12, (opening, joining)


def test_late_state_of_several_nodes_attributes_only_the_faults_it_is_valid_for(store: Store) -> None:
    ka, kb = Kmsg("la"), Kmsg("lb")
    store.process(items_of([ka.xid(1, 79, T0 + s(10)), kb.xid(1, 79, T0 + s(10))]))  # kernel topic read first
    res = store.process(items_of([
        inventory("la", T0), pods("la", T0 + s(5), {1: ("ml", "infer-0", "srv")}),  # valid at la's fault
        inventory("lb", T0 + s(60)), pods("lb", T0 + s(65), {1: ("ml", "infer-1", "srv")}),  # after lb's
    ]))
    assert [(o.payload["change"], o.payload["incident"]["node"]) for o in res.outgoing] == [("attributed", "la")]
    pods_of = {e["node"]: e["pod"] for e in store_reads.fault_events(store)}
    assert pods_of == {"la": "infer-0", "lb": None}
