"""The committed offset of a partition never stands inside a record, so its next reader parses every
record whole (`streams.items._PartitionHolds`).

Nodes share a partition, so their multi-line records interleave: one node's SXid group or AER report
can be stored whole while another node's record, opened between its lines, is still open. A worker
that stops, crashes or loses the partition leaves it to a reader that starts at the committed
offset (the first held line) and parses from there; that reader must make only records the first
one would have made (the store drops them as duplicates), never the later lines of a record alone.
"""

from __future__ import annotations

from typing import Any

import pytest

from models.node_records import NodeRecord
from streams.items import FaultItem, Item, ItemMapper
from tests.streams.records import T0, Kmsg
from tests.streams.scaleout_workload import NODES, _gpu_lost, _node_lines, _sxid

TOPIC = "t.xidpipe.node.kernel"


def _partition_lines(nodes: range) -> list[NodeRecord]:
    """The kernel lines of `nodes` as one partition carries them: every node's lines, interleaved."""
    per_node = []
    for i in nodes:
        a, b = _node_lines(i, NODES[i], Kmsg(NODES[i], boot_id=f"b-{NODES[i]}"))
        per_node.append([*a, *b])
    out: list[NodeRecord] = []
    for n in range(max(len(lines) for lines in per_node)):
        out.extend(lines[n] for lines in per_node if n < len(lines))
    return out


def _key(item: Item) -> Any:
    """What tells one record from another: its first line, content and number of lines."""
    if isinstance(item, FaultItem):
        o = item.observation
        return o.record_id, o.content_hash, o.raw.count("\n") + 1
    return getattr(item, "record_id", None)


def _read(lines: list[NodeRecord], start: int, stop: int, batch: int) -> tuple[ItemMapper, set[Any], int]:
    """A reader of offsets [start, stop) in batches: what it stored, and its committed offset (the
    first line it still holds, as `streams.committer.Acks` acknowledges)."""
    mapper = ItemMapper()
    stored: set[Any] = set()
    held: set[int] = set()
    for first in range(start, stop, batch):
        for offset in range(first, min(first + batch, stop)):
            stored.update(_key(i) for i in mapper.items(lines[offset], TOPIC, (TOPIC, 0, offset)))
        now_held, released = mapper.holds()
        held |= {r[2] for r in now_held}
        held -= {r[2] for r in released}
    return mapper, stored, min(held, default=stop)


def _whole(lines: list[NodeRecord]) -> set[Any]:
    mapper, stored, _ = _read(lines, 0, len(lines), 1)
    return stored | {_key(i) for i in mapper.flush_all()}


@pytest.mark.parametrize("batch", [1, 4, 17])
def test_a_reader_from_the_committed_offset_parses_every_record_whole(batch: int) -> None:
    lines = _partition_lines(range(0, 60, 5))  # twelve nodes: every kind of record of the workload
    whole = _whole(lines)
    assert sum(1 for k in whole if isinstance(k, tuple) and k[2] > 1) >= 4, "multi-line records in it"
    cut_inside = 0
    for stop in range(1, len(lines)):
        _, stored, committed = _read(lines, 0, stop, batch)
        nxt, again, _ = _read(lines, committed, len(lines), batch)
        again |= {_key(i) for i in nxt.flush_all()}
        assert again <= whole, (stop, committed, sorted(again - whole, key=str)[:3])  # no record in part
        assert stored | again == whole, (stop, committed)  # and none lost
        cut_inside += bool(stored & again)
    assert cut_inside, "some crash points leave stored records to be read again"


def test_a_stored_record_around_an_open_one_is_held_until_the_open_one_is_stored() -> None:
    sxid, aer = Kmsg("sx", boot_id="b-sx"), Kmsg("ae", boot_id="b-ae")
    group = list(_sxid(sxid, T0, 32))
    report = list(_gpu_lost(aer, T0))
    lines = [group[0], report[0], group[1], group[2], sxid.line("xfs remounted", T0, fault=False)]
    mapper = ItemMapper()
    for offset, line in enumerate(lines):
        mapper.items(line, TOPIC, (TOPIC, 0, offset))
    held, released = mapper.holds()
    # The SXid group is stored, but the AER report opened inside it: the group's lines stay held, so the
    # committed offset stops at the group's first line, not at the report's inside the group.
    assert sorted(r[2] for r in held) == [0, 1, 2, 3, 4] and released == []
    for offset, line in enumerate(report[1:], start=len(lines)):
        mapper.items(line, TOPIC, (TOPIC, 0, offset))
    mapper.items(aer.line("xfs remounted", T0, fault=False), TOPIC, (TOPIC, 0, 99))
    mapper.flush_all()
    held, released = mapper.holds()
    assert held == [] and {0, 1, 2, 3, 4} <= {r[2] for r in released}


def test_a_record_ends_on_its_last_line_not_on_the_line_that_closed_it() -> None:
    # x0's AER report is closed by its Xid 79, read after x1's report opened: the Xid is a record of its
    # own, so x0's report (offsets 0-3) is passed, and only x1's open report holds the offset back.
    x0, x1 = (list(_gpu_lost(Kmsg(n, boot_id=f"b-{n}"), T0)) for n in ("x0", "x1"))
    lines = [*x0[:4], *x1[:2], x0[4]]
    _, stored, committed = _read(lines, 0, len(lines), 1)
    assert ("kmsg:b-x0:1001", 4) in {(k[0], k[2]) for k in stored} and committed == 4


def test_a_revoked_partition_leaves_no_parser_and_no_hold_behind() -> None:
    lines = _partition_lines(range(0, 12))
    mapper = ItemMapper()
    for offset, line in enumerate(lines[:40]):
        mapper.items(line, TOPIC, (TOPIC, 0, offset))
    mapper.items(Kmsg("elsewhere").line("xfs remounted", T0, fault=False), TOPIC, (TOPIC, 1, 0))
    held, _ = mapper.holds()
    assert held
    assert mapper.forget([(TOPIC, 0)]) == 12  # every node of the partition, open record or not
    assert mapper.nodes == 1 and mapper.holds() == ([], [])
    assert mapper.flush_all() == []  # nothing of the partition is stored after the revocation
