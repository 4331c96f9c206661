"""The intake (decode, parse, store in one call) and the worker's adaptive batches, without Kafka."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from history.tables import OutboxMessage
from models.node_records import Evidence, encode_node_record
from models.stream_policy import PipelinePolicy
from models.topics import topology
from streams.intake import Intake, IntakeResult, Message, bad_field
from streams.intake_process import IntakeProcess
from streams.items import FaultItem, StateItem
from streams.store import Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, pci, s

TOPO = topology("t.", 2)
KINDS = {t.name: kinds for t in TOPO.inputs if (kinds := TOPO.kinds_for(t.name))}


def messages(records: list[Any], first_offset: int = 0) -> list[Message]:
    return [Message(TOPO.kernel.name, 0, first_offset + i, r.node.encode(), encode_node_record(r))
            for i, r in enumerate(records)]


def intake(tmp_path: Path) -> Intake:
    store = Store(f"sqlite:///{tmp_path / 'i.db'}", PipelinePolicy())
    store.create_schema()
    return Intake(store, KINDS)


def test_a_retried_batch_is_parsed_once_and_stored_once(tmp_path: Path) -> None:
    it = intake(tmp_path)
    k = Kmsg("n1")
    batch = messages([k.xid(0, 13, T0 + s(i), 7, "p") for i in range(3)])
    first = it.handle(1, batch, [])
    again = it.handle(1, batch, [])  # as after a transient error: the same items, already stored
    assert first.faults == 3 and again.faults == 0 and again.duplicates == 3
    assert len(store_reads.fault_events(it.store)) == 3
    assert it.mapper._parsers["n1"].lineno == 3  # each line went through the node's parser once
    it.dispose()


def test_poison_messages_come_back_as_dead_letters_and_the_rest_is_stored(tmp_path: Path) -> None:
    it = intake(tmp_path)
    k = Kmsg("n2")
    good = messages([k.xid(0, 13, T0, 7, "p")])
    bad = Message(TOPO.kernel.name, 0, 9, b"n2", b"{not json")
    res = it.handle(1, [*good, bad], [])
    assert [d.reason for d in res.dead_letters] == ["undecodable"] and res.faults == 1
    quiet = it.handle(2, [bad], [4])  # nothing to store: no transaction, the outbox ids stay unmarked
    assert not quiet.marked and len(quiet.dead_letters) == 1
    it.dispose()


def test_a_batch_that_fails_is_stored_message_by_message(tmp_path: Path) -> None:
    it = intake(tmp_path)
    k = Kmsg("n3")
    batch = messages([k.xid(0, 13, T0 + s(i), 7, "p") for i in range(2)])
    res = it.handle(1, batch, [], per_message=True)
    assert res.dead_letters == [] and len(store_reads.fault_events(it.store)) == 2
    it.dispose()


def test_thread_store_marks_published_rows_in_the_next_transaction(tmp_path: Path) -> None:
    async def run() -> None:
        st = IntakeProcess(f"sqlite:///{tmp_path / 'a.db'}", kinds=KINDS, process=False)
        await st.create_schema()
        k = Kmsg("n4")
        res = await st.handle(1, messages([k.xid(0, 48, T0, 7, "p")]))
        ids = [o.outbox_id for o in res.outgoing]
        assert ids
        await st.handle(2, messages([k.xid(1, 48, T0 + s(1), 7, "p")], first_offset=1), ids)
        assert st.intake is not None
        with st.intake.store.engine.connect() as conn:
            unsent = conn.execute(sa.select(sa.func.count()).select_from(OutboxMessage)
                                  .where(OutboxMessage.id.in_(ids), OutboxMessage.sent_at.is_(None))).scalar()
        assert unsent == 0
        st.close()

    asyncio.run(run())


NOTICE = (f"NVRM: The NVIDIA GPU {pci(1)}", "NVRM: (PCI ID: 10de:2330) installed in this system has",
          "NVRM: fallen off the bus and is not responding to commands.")


def _notice(first_offset: int = 0) -> tuple[list[Message], list[Message]]:
    """The three-line notice of node n5 with another node's Xid after its second line."""
    bus, other = Kmsg("n5"), Kmsg("n6")
    lines = [bus.line(text, T0 + s(i)) for i, text in enumerate(NOTICE)]
    first = messages([lines[0], lines[1], other.xid(0, 48, T0 + s(1), 7, "p")], first_offset)
    return first, messages([lines[2]], first_offset + 3)


def test_the_lines_of_an_open_record_are_held_until_a_transaction_stores_it(tmp_path: Path) -> None:
    it = intake(tmp_path)
    first, last = _notice()
    res = it.handle(1, first, [])
    assert res.faults == 1  # the other node's Xid
    assert res.held == [(m.topic, m.partition, m.offset) for m in first[:2]] and res.released == []
    again = it.handle(1, first, [])  # a retry reports the same holds
    assert again.held == res.held
    res = it.handle(2, last, [])
    assert res.faults == 0 and res.held == [(last[0].topic, 0, 3)]  # complete, but open until a next line
    flushed = it.flush_idle(0.0)
    assert flushed.faults == 1 and flushed.held == []
    assert sorted(flushed.released) == [(first[0].topic, 0, o) for o in (0, 1, 3)]
    (notice,) = [e for e in store_reads.fault_events(it.store) if e["node"] == "n5"]
    assert notice["kind"] == "gpu_fallen_off_bus" and notice["pci"] == pci(1)
    assert it.flush_idle(0.0).released == []  # released once
    it.dispose()


def test_a_revoked_partition_takes_its_open_records_along(tmp_path: Path) -> None:
    it = intake(tmp_path)
    first, _ = _notice()
    it.handle(1, first, [])
    assert it.forget([(TOPO.kernel.name, 1)]) == 0  # another partition: nothing to drop
    assert it.forget([(TOPO.kernel.name, 0)]) == 2  # both nodes of the partition: the open record's and n6
    flushed = it.flush_idle(0.0)
    assert flushed.faults == 0 and flushed.released == []  # nothing stored: the next reader parses it
    assert [e["node"] for e in store_reads.fault_events(it.store)] == ["n6"]
    it.dispose()


def evidence(node: str, n: int, **fields: Any) -> Message:
    record = Evidence(node=node, record_id=f"evidence:{node}:{n}", trigger_record_id=f"kmsg:b:{n}", **fields)
    return Message(TOPO.evidence.name, 0, 100 + n, node.encode(), encode_node_record(record))


def store_with_hostile_fields(it: Intake, node: str, hostile: list[Message]) -> IntakeResult:
    k = Kmsg(node)
    good = messages([k.xid(0, 13, T0, 7, "p"), k.xid(1, 31, T0 + s(1), 8, "q")])
    return it.handle(1, [good[0], *hostile, good[1]], [])


def test_a_bad_integer_rejects_only_its_record_never_the_batch(tmp_path: Path) -> None:
    it = intake(tmp_path)
    res = store_with_hostile_fields(it, "n4", [evidence("n4", 1, pid=10**23), evidence("n4", 2, pid=42)])
    assert res.faults == 2 and res.evidence == 1  # the batch went through in its one transaction
    assert [(d.reason, d.offset) for d in res.dead_letters] == [("bad_field", 101)]
    assert "evidence field pid" in res.dead_letters[0].error and "out of range" in res.dead_letters[0].error
    assert json.loads(res.dead_letters[0].value or b"")["pid"] == 10**23  # the original bytes are kept
    it.dispose()


def test_bad_fields_postgres_refuses_are_set_aside_before_the_transaction(postgres_database: str) -> None:
    store = Store(postgres_database, PipelinePolicy())
    store.create_schema()
    it = Intake(store, KINDS)
    hostile = [evidence("n5", 1, pid=2**31), evidence("n5", 2, gpu_uuid="GPU-\0-x"),
               evidence("n5", 3, gpu_uuid="G" * 200), evidence("n5", 4, xid=7, pid=9)]
    res = store_with_hostile_fields(it, "n5", hostile)
    assert res.faults == 2 and res.evidence == 1
    assert [d.offset for d in res.dead_letters] == [101, 102, 103]
    assert all(d.reason == "bad_field" for d in res.dead_letters)
    errors = [d.error for d in res.dead_letters]
    assert "pid" in errors[0] and "NUL" in errors[1] and "200 characters" in errors[2]
    it.dispose()


@pytest.mark.parametrize(("value", "problem"), [
    ({"a": [1, 2**64]}, "out of range"), ({"a": {"b": float("nan")}}, "not a finite"),
    ({"a\0": 1}, "NUL"), ({"ok": [1, "x", 2.5, None, True]}, None),
])
def test_bad_field_finds_what_no_column_or_json_holds_at_any_depth(value: dict[str, Any], problem: str | None
                                                                   ) -> None:
    item = StateItem("n6", "r1", TOPO.state.name, "processes", T0, value)
    found = bad_field(item)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_a_message_whose_records_fail_together_is_stored_record_by_record(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    it = intake(tmp_path)
    k = Kmsg("n7")
    batch = messages([k.xid(0, 13, T0, 7, "p"), k.xid(1, 13, T0 + s(1), 8, "q")])
    real = it.store.process

    def refuse_pid_8(items: Any, *args: Any, **kw: Any) -> Any:  # a constraint only the database knows
        if any(isinstance(i, FaultItem) and i.observation.pid == 8 for i in items):
            raise sa.exc.DataError("INSERT", {}, Exception("value out of range"))
        return real(items, *args, **kw)

    monkeypatch.setattr(it.store, "process", refuse_pid_8)
    items = [i for _, its in it._prepare(batch)[0] for i in its]
    res = IntakeResult()
    assert len(it._store_each(items, res, split=True)) == 1  # one record failed, the other was stored
    assert [e["pid"] for e in store_reads.fault_events(it.store)] == [7]
    it.dispose()


