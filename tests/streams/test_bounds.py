"""The stream worker's per-node kernel-log state is bounded: idle nodes expire, a size bound evicts,
and neither loses a record or a held line."""

from __future__ import annotations

import time
from pathlib import Path

from models.node_records import KernelLine, encode_node_record
from streams.intake import Intake, Message
from streams.items import FaultItem, ItemMapper, ParserBounds, StateItem
from streams.store import Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, pci, s, uuid

TOPIC = "xidpipe.node.kernel"
KINDS = {TOPIC: frozenset({"kernel_line", "kernel_gap"})}
XID_119 = ("NVRM: Xid (PCI:{bus}): 119, pid=1234, name=python, Timeout after 6s of waiting for RPC response from "
           "GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).")


def _banner(k: Kmsg, i: int) -> KernelLine:
    return k.line(f"NVRM: GPU {pci(i % 8)}: persistence mode enabled", T0 + s(i), fault=False)


def _wait_past(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() <= deadline:
        time.sleep(seconds / 4)


def test_a_node_keeps_only_the_open_records_first_line() -> None:
    mapper = ItemMapper()
    k = Kmsg("n1")
    for i in range(1000):
        mapper.items(_banner(k, i), TOPIC)
    first = k.line(XID_119.format(bus=pci(0)[:-2]), T0 + s(1001))
    mapper.items(first, TOPIC)
    for i in range(300):  # driver lines that neither continue nor close the open record
        mapper.items(_banner(k, 2000 + i), TOPIC)
    assert list(mapper._parsers["n1"].lines.values()) == [first]
    out = mapper.flush_all()
    assert [i.observation.record_id for i in out if isinstance(i, FaultItem)] == [first.record_id]
    assert mapper._parsers["n1"].lines == {}


def test_an_idle_nodes_open_record_is_stored_and_its_lines_released_before_its_parser_is_dropped(
        tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'x.db'}")
    store.create_schema()
    intake = Intake(store, KINDS, ParserBounds(node_idle_s=2.0))
    k = Kmsg("n1")
    identity, serial = k.identity(0, T0)
    line = k.line(XID_119.format(bus=pci(0)[:-2]), T0 + s(1))
    msgs = [Message(TOPIC, 0, off, b"n1", encode_node_record(rec)) for off, rec in enumerate((identity, serial, line))]
    res = intake.handle(1, msgs, [])
    assert res.held == [(TOPIC, 0, 2)]  # the Xid 119 waits for its body lines
    assert store_reads.fault_events(store) == []
    flushed = intake.flush_idle(3600.0)  # not quiet for an hour: nothing is closed as merely idle
    assert flushed.released == [] and intake.mapper.nodes == 1
    _wait_past(2.0)
    flushed = intake.flush_idle(3600.0)
    assert flushed.released == [(TOPIC, 0, 2)]
    assert [e["record_id"] for e in store_reads.fault_events(store)] == [line.record_id]
    assert intake.mapper.nodes == 0
    assert (intake.mapper.expired.idle, intake.mapper.expired.records_closed) == (1, 1)
    # What the dropped parser knew of the node's GPUs comes back with the node's next line.
    intake.mapper.items(_banner(k, 5), TOPIC)
    memory = intake.mapper._parsers["n1"].parser.memory()
    assert memory is not None and pci(0)[:-2] in {p[:-2] for p in memory.known_gpus}
    store.dispose()


def test_past_the_size_bound_the_least_recently_fed_nodes_are_dropped() -> None:
    mapper = ItemMapper(ParserBounds(max_nodes=3))
    nodes = [Kmsg(f"n{i}") for i in range(6)]
    for k in nodes[:3]:
        mapper.items(_banner(k, 0), TOPIC)
    mapper.items(_banner(nodes[0], 1), TOPIC)  # n0 is now the most recently fed
    for k in nodes[3:5]:
        mapper.items(_banner(k, 0), TOPIC)
    assert list(mapper._parsers) == ["n0", "n3", "n4"]
    assert mapper.expired.over_size == 2
    assert mapper.nodes == 3


def test_an_evicted_nodes_open_record_is_closed_and_its_held_lines_released() -> None:
    mapper = ItemMapper(ParserBounds(max_nodes=2))
    k0, k1, k2 = Kmsg("n0"), Kmsg("n1"), Kmsg("n2")
    opened = k0.line(XID_119.format(bus=pci(3)[:-2]), T0)
    mapper.items(opened, TOPIC, (TOPIC, 0, 7))
    assert mapper.holds() == ([(TOPIC, 0, 7)], [])
    mapper.items(_banner(k1, 0), TOPIC)
    mapper.items(_banner(k2, 0), TOPIC)
    assert mapper.nodes == 3  # n0's record is open: it is not dropped on the line path
    items = mapper.flush_idle(3600.0)
    assert [i.observation.record_id for i in items if isinstance(i, FaultItem)] == [opened.record_id]
    assert mapper.holds() == ([], [(TOPIC, 0, 7)])
    assert list(mapper._parsers) == ["n1", "n2"]
    assert mapper.expired.over_size == 1


def test_record_ids_are_those_of_an_unbounded_parser() -> None:
    """The same lines give the same items, with the same record ids, whatever the bounds."""
    k = Kmsg("n1")
    lines = [*k.identity(0, T0), _banner(k, 1), k.line(XID_119.format(bus=pci(1)[:-2]), T0 + s(2)),
             *k.identity(2, T0 + s(3)), k.xid(3, 13, T0 + s(4), pid=77, name="python3")]
    tight = ItemMapper(ParserBounds(max_nodes=1, node_idle_s=3600.0))
    out = [i for line in lines for i in tight.items(line, TOPIC)] + tight.flush_all()
    ids = [i.observation.record_id if isinstance(i, FaultItem) else i.record_id for i in out]
    assert ids == [f"identity:{lines[0].record_id}:0", lines[3].record_id,
                   f"identity:{lines[4].record_id}:0", lines[6].record_id]
    assert [i.payload["uuid"] for i in out if isinstance(i, StateItem)] == [uuid("n1", 0), uuid("n1", 2)]
