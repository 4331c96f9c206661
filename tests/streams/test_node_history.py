"""The node histories the store keeps between batches: compact, the same history once validated again,
and bounded in bytes."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from history.tables import NodeState
from models.correlate import IdentityLine, InventorySnapshot, NodeHistory, PodSnapshot, ProcessSnapshot
from models.node_records import DeviceAssignment, EccCounts, GpuInfo, GpuProcess
from models.stream_policy import PipelinePolicy
from streams.node_history import compact, history_cache
from streams.store import Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, items_of, pods, processes, s

NODE = "n1"


def _row(kind: str, at: datetime, payload: dict[str, Any]) -> NodeState:
    return NodeState(node=NODE, kind=kind, record_id=f"{kind}:{at.isoformat()}", valid_from=at, payload=payload)


def _state_rows() -> list[NodeState]:
    inv = inventory(NODE, T0, gpus=8, mig_on=2)
    gpus = list(inv.gpus)
    gpus[3] = gpus[3].model_copy(update={"ecc": EccCounts(volatile_uncorrected=2), "nvlink_active": (True, False)})
    changed = inv.model_copy(update={"gpus": tuple(gpus)})
    return [  # out of time order, as the two queries of a history return them
        _row("inventory", T0 + s(600), changed.model_dump(mode="json")),
        _row("inventory", T0, inv.model_dump(mode="json")),
        _row("inventory", T0 + s(300), inv.model_dump(mode="json")),
        _row("pods", T0 + s(5), pods(NODE, T0, {1: ("ml", "train-0", "main"), 2: ("ml", "train-1", "main")})
             .model_dump(mode="json")),
        _row("processes", T0 + s(6), processes(NODE, T0, {4242: 1, 4243: 2}).model_dump(mode="json")),
        _row("identity", T0 + s(7), {"pci": "0000:38:00.0", "uuid": "GPU-x", "serial": None}),
    ]


def _validated_as_before(rows: list[NodeState]) -> NodeHistory:
    """The history as the validated rows themselves give it."""
    h = NodeHistory(NODE)
    for r in rows:
        p = r.payload
        if r.kind == "inventory":
            h.inventories.append(InventorySnapshot(r.valid_from, tuple(GpuInfo.model_validate(g) for g in p["gpus"])))
        elif r.kind == "pods":
            h.pods.append(PodSnapshot(r.valid_from, tuple(DeviceAssignment.model_validate(a)
                                                          for a in p["assignments"])))
        elif r.kind == "processes":
            h.processes.append(ProcessSnapshot(r.valid_from, tuple(GpuProcess.model_validate(x)
                                                                   for x in p["processes"])))
        else:
            h.identities.append(IdentityLine(r.valid_from, p["pci"], p.get("uuid"), p.get("serial")))
    return h.sort()


def test_a_compact_history_validates_to_the_history_of_its_rows() -> None:
    rows = _state_rows()
    h = compact(NODE, rows).expand()
    assert h == _validated_as_before(rows)
    assert [i.at for i in h.inventories] == [T0, T0 + s(300), T0 + s(600)]
    assert h.inventories[2].gpus[3].ecc == EccCounts(volatile_uncorrected=2)
    assert h.inventories[0].gpus[2].mig_devices  # nested models survive


def test_repeated_snapshots_keep_their_times_and_share_one_text() -> None:
    rows = _state_rows()
    c = compact(NODE, rows)
    (_, first), (_, repeat), (_, changed) = c.inventories
    assert repeat is first and changed != first
    h = c.expand()
    assert h.inventories[1].gpus is h.inventories[0].gpus  # validated once
    assert h.inventories[2].gpus is not h.inventories[0].gpus
    once = compact(NODE, [r for r in rows if r.valid_from != T0 + s(300)])
    assert c.size - once.size < len(first)  # the repeat costs its time, not its items again


def test_a_compact_history_holds_a_fraction_of_the_validated_one() -> None:
    rows = _state_rows()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        kept = [compact(NODE, rows) for _ in range(50)]
        compact_bytes = tracemalloc.get_traced_memory()[0] - base
        expanded = [c.expand() for c in kept]
        expanded_bytes = tracemalloc.get_traced_memory()[0] - base - compact_bytes
    finally:
        tracemalloc.stop()
    assert len(expanded) == 50
    assert compact_bytes * 4 < expanded_bytes, (compact_bytes, expanded_bytes)
    per_history = compact_bytes / 50
    assert per_history / 2 < kept[0].size < per_history * 2  # `size`, which the cache's bound counts, is about right


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store(f"sqlite:///{tmp_path / 'h.db'}", PipelinePolicy(quiet_period_s=600))
    st.create_schema()
    yield st
    st.dispose()


def test_the_cache_is_bounded_in_bytes_and_a_history_past_it_is_read_again(store: Store) -> None:
    nodes = [f"node-{i}" for i in range(6)]
    store.process(items_of([r for n in nodes
                            for r in (inventory(n, T0), pods(n, T0, {1: ("ml", f"job-{n}", "main")}))]))
    store.process(items_of([Kmsg(nodes[0]).xid(1, 13, T0 + s(10), 4242, "python3")]))
    one = store.caches.histories.currsize
    assert one > 0
    store.caches.histories = history_cache(size=int(3 * one))
    for i, n in enumerate(nodes):
        store.process(items_of([Kmsg(n, seq=2000).xid(1, 13, T0 + s(20 + i), 4242, "python3")]))
        assert store.caches.histories.currsize <= 3 * one
    assert 0 < len(store.caches.histories) <= 3
    assert nodes[0] not in store.caches.histories  # the least recently used went first
    store.process(items_of([Kmsg(nodes[0], seq=3000).xid(1, 31, T0 + s(40), 4242, "python3")]))
    pods_of = {(e["node"], e["xid"]): e["pod"] for e in store_reads.fault_events(store)}
    assert all(pods_of[(n, 13)] == f"job-{n}" for n in nodes)
    assert pods_of[(nodes[0], 31)] == f"job-{nodes[0]}"  # read from node_states again
    assert nodes[0] in store.caches.histories
