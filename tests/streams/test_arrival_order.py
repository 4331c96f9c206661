"""The same records give the same incidents whatever order and batches they arrive in.

A recorded cluster (`tests.recorded_cluster`: twelve nodes over 60 hours, hundreds of faults: jobs
crashing on one GPU and across GPUs, a GPU failing different jobs, GPUs falling off the bus with their
bus-loss lines, a double-bit error that recurs after the quiet period, two memory fleet bursts, a GSP
failure, an NVLink storm) goes through the stream's store in one process: as `xidpipe replay` reads
it, node by node in either direction, interleaved as many agents send it in batches of every size,
and all of it twice (a worker that died before it committed anything). Every way gives the same
incidents, field by field (`tests.recorded_cluster.incident_facts`). The same recording through Kafka
and a worker on PostgreSQL: `tests/streams/test_arrival_order_kafka.py`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from models.node_records import NodeRecord
from models.stream_policy import PipelinePolicy
from models.wire import topic_for
from streams.items import Item, ItemMapper
from streams.store import Store
from tests import store_reads
from tests.recorded_cluster import incident_facts, interleaved, node_records, write_recording
from tests.streams.records import T0, Kmsg, inventory, pci, s
from xidpipe.replay import run_replay

CLUSTER = "replay"  # the fleet incidents' cluster name, as replay names it


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    root = tmp_path_factory.mktemp("recorded") / "cluster"
    write_recording(root)
    replayed = tmp_path_factory.mktemp("replayed") / "replay.db"
    result = run_replay(root, database_url=f"sqlite:///{replayed}", cluster_name=CLUSTER)
    assert len(result.incidents) > 150
    store = Store(f"sqlite:///{replayed}")
    try:
        return root, incident_facts(store.engine)
    finally:
        store.dispose()


def _batches(records: list[NodeRecord], sizes: Iterator[int]) -> Iterator[list[NodeRecord]]:
    i = 0
    while i < len(records):
        n = next(sizes)
        yield records[i:i + n]
        i += n


def _stream(url: str, batches: Iterator[list[NodeRecord]]) -> list[Any]:
    """Run the batches through one store (one mapper: the worker's per-node parsers); the facts."""
    store = Store(url, PipelinePolicy(), CLUSTER)
    store.create_schema()
    mapper = ItemMapper()
    try:
        for batch in batches:
            store.process([i for r in batch for i in mapper.items(r, topic_for(r))])
        store.process(mapper.flush_all())
        return incident_facts(store.engine)
    finally:
        store.dispose()


def _sizes(seed: int, lo: int, hi: int) -> Iterator[int]:
    rnd = random.Random(seed)
    while True:
        yield rnd.randint(lo, hi)


def _orders(root: Path) -> dict[str, list[NodeRecord]]:
    state, per_node = node_records(root)
    nodes = sorted(per_node)
    return {
        "node by node": state + [r for n in nodes for r in per_node[n]],
        "node by node, the last node first": state + [r for n in reversed(nodes) for r in per_node[n]],
        "agents interleaved": state + interleaved(per_node, seed=1),
        "agents interleaved, in runs of one to three records": state + interleaved(per_node, seed=2, chunk=(1, 3)),
    }


@pytest.mark.parametrize("order", ["node by node", "node by node, the last node first", "agents interleaved",
                                   "agents interleaved, in runs of one to three records"])
@pytest.mark.parametrize("batch", [(1, 60), (400, 2000)], ids=["small batches", "large batches"])
def test_every_arrival_order_gives_the_incidents_replay_gives(recorded: tuple[Path, list[Any]], tmp_path: Path,
                                                              order: str, batch: tuple[int, int]) -> None:
    root, replayed = recorded
    records = _orders(root)[order]
    got = _stream(f"sqlite:///{tmp_path / 'live.db'}", _batches(records, _sizes(7, *batch)))
    assert got == replayed


def test_records_read_twice_after_a_crash_give_the_same_incidents(recorded: tuple[Path, list[Any]],
                                                                  tmp_path: Path) -> None:
    """A worker that stored every batch and died before it committed an offset: the next reads all of it
    again, with parsers of its own. Nothing is counted twice, no action is asked for twice."""
    root, replayed = recorded
    records = _orders(root)["agents interleaved"]
    url = f"sqlite:///{tmp_path / 'again.db'}"
    first = _stream(url, _batches(records, _sizes(3, 1, 80)))
    store = Store(url)
    try:
        events, outbox = len(store_reads.fault_events(store)), store_reads.counts(store)["outbox"]
    finally:
        store.dispose()
    again = _stream(url, _batches(records, _sizes(4, 1, 80)))
    store = Store(url)
    try:
        assert len(store_reads.fault_events(store)) == events and store_reads.counts(store)["outbox"] == outbox
    finally:
        store.dispose()
    assert first == again == replayed


def _items(records: list[NodeRecord]) -> list[Item]:
    mapper = ItemMapper()
    return [i for r in records for i in mapper.items(r, topic_for(r))] + mapper.flush_all()


BUS_LOSS = (f"NVRM: The NVIDIA GPU {pci(1)}", "NVRM: (PCI ID: 10de:2330) installed in this system has",
            "NVRM: fallen off the bus and is not responding to commands.")
GPU_LOST = ("NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F) "
            "returned from pRmApi->Control(pRmApi) @ kern_bus.c:1123")


@pytest.mark.parametrize("cut", [None, 1, 5], ids=["one batch", "the Xid 79 alone first", "the ECC error alone"])
def test_a_bus_loss_line_joins_the_xid_79_it_came_with_in_a_batch_holding_hours(db_url: str, cut: int | None) -> None:
    """One batch holds the GPU falling off the bus and, two hours later, a contained ECC error on the
    same GPU: the node-level "GPU lost" line is one more report of the bus loss (not a fault of its own,
    with an incident, a ticket and a cordon request of its own), whichever batch reads it."""
    k = Kmsg("bus-0")
    at = T0 + s(10)
    records: list[NodeRecord] = [
        inventory("bus-0", T0 - s(600)), k.xid(1, 79, at, text="GPU has fallen off the bus."),
        *(k.line(text, at + s(0.1)) for text in BUS_LOSS), k.line(GPU_LOST, at + s(0.5)),
        k.xid(1, 94, T0 + s(7200), text="Contained: SM (0x1). RST: No, D-RST: No"),
    ]
    store = Store(db_url, PipelinePolicy(), CLUSTER)
    store.create_schema()
    try:
        mapper = ItemMapper()
        for part in ([records] if cut is None else [records[:cut + 1], records[cut + 1:]]):
            store.process([i for r in part for i in mapper.items(r, topic_for(r))])
        store.process(mapper.flush_all())
        incidents = store_reads.incidents(store)
        assert [(i["component"], i["family"], i["count"]) for i in incidents] == [("gpu", "gpu_lost", 2)]
        (line,) = [e for e in store_reads.fault_events(store) if e["kind"] == "driver_error"]
        assert line["counted"] is False and line["gpu"] != "node"
    finally:
        store.dispose()


DBE = "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6."


def _double_bit_errors(db_url: str, batches: int) -> list[set[tuple[str, str]]]:
    """A double-bit error, and the same GPU's next one after more than the quiet period, in one batch or
    two: the action requests (kind, operation) of each incident, in the order they opened."""
    k = Kmsg("dbe-0")
    quiet = timedelta(seconds=PipelinePolicy().quiet_period_s)
    records: list[NodeRecord] = [inventory("dbe-0", T0 - s(600)), k.xid(0, 48, T0 + s(5), text=DBE),
                                 k.xid(0, 48, T0 + s(5) + quiet + s(3600), text=DBE)]
    store = Store(db_url, PipelinePolicy(), CLUSTER)
    store.create_schema()
    try:
        mapper = ItemMapper()
        parts = [records] if batches == 1 else [records[:2], records[2:]]
        results = [store.process([i for r in part for i in mapper.items(r, topic_for(r))]) for part in parts]
        results.append(store.process(mapper.flush_all()))
        first, second = sorted(store_reads.incidents(store), key=lambda i: i["first_seen"])
        assert (first["status"], second["status"]) == ("resolved", "open")
        return [{(o.payload["kind"], o.payload["operation"]) for r in results for o in r.outgoing
                 if o.stream == "actions" and o.payload["incident_id"] == i["incident_id"]} for i in (first, second)]
    finally:
        store.dispose()


def test_an_incident_opened_and_resolved_in_one_batch_asks_for_its_ticket_message_and_cordon(
        db_url: str, tmp_path: Path) -> None:
    """Both errors in one transaction (always so in replay, and after any outage): the first incident
    opens and is resolved in it, and asks for everything an incident asks for when it opens, as it
    would in two."""
    one = _double_bit_errors(db_url, 1)
    two = _double_bit_errors(f"sqlite:///{tmp_path / 'two.db'}", 2)
    assert one == two
    assert {("ticket", "create"), ("notification", "opened"), ("cordon_candidate", "cordon"),
            ("notification", "resolved")} <= one[0]


def test_xidpipe_scan_finds_the_incidents_replay_finds_but_the_fleet_s(recorded: tuple[Path, list[Any]]) -> None:
    """`xidpipe scan` runs the same engine on a table in memory (no fleet view): the same incidents,
    statuses included, as replay's but its fleet incidents."""
    from models.scan import scan
    from xidpipe.commands.scan import collect
    from xidpipe.replay.layout import read_state

    root, replayed = recorded
    scanned = scan(collect(sorted(str(p) for p in root.glob("*.log")), None, 2026),
                   state=read_state(root / "state.jsonl"))
    got = sorted((i.fingerprint, i.component, i.state.component_id, tuple(sorted(i.codes())), i.count, i.category,
                  i.family, i.state.status) for i in scanned)
    assert got == sorted(f[:8] for f in replayed if f[1] != "fleet")
