import threading
from pathlib import Path

import pytest

from agents.metrics import Metrics
from agents.spool import Spool

KiB = 1024


def _spool(tmp_path: Path, **kw: int) -> Spool:
    return Spool(tmp_path / "spool", Metrics(), **kw)  # type: ignore[arg-type]


def _add(s: Spool, i: int, *, fault: bool = False, size: int = 100) -> int | None:
    return s.append("t", "node", "x" * size, fault=fault, record_id=f"r{i}", source="kmsg",
                    cursor={"boot_id": "b", "seq": i})


def test_records_come_back_in_order_and_survive_reopening(tmp_path: Path) -> None:
    s = _spool(tmp_path, segment_bytes=1000)
    numbers = [_add(s, i) for i in range(30)]
    assert numbers == list(range(1, 31))
    assert [e.record_id for e in s.read(10)] == [f"r{i}" for i in range(10)]
    s.ack(10)
    s.close()
    again = _spool(tmp_path, segment_bytes=1000)
    assert again.pending_count() == 20
    assert [e.number for e in again.read(100)] == list(range(11, 31))
    assert _add(again, 99) == 31


def test_ack_deletes_fully_acknowledged_segments(tmp_path: Path) -> None:
    s = _spool(tmp_path, segment_bytes=1000)
    for i in range(50):
        _add(s, i)
    before = len(list((tmp_path / "spool").glob("*.seg")))
    s.read(50)
    s.ack(50)
    after = len(list((tmp_path / "spool").glob("*.seg")))
    assert before > 3 and after == 1


def test_when_full_non_fault_records_drop_and_faults_use_the_reserve(tmp_path: Path) -> None:
    m = Metrics()
    s = Spool(tmp_path / "spool", m, max_bytes=10 * KiB, fault_reserve_bytes=4 * KiB, segment_bytes=2 * KiB)
    kept = [_add(s, i, size=400) for i in range(40)]
    dropped = kept.count(None)
    assert dropped > 0 and m.get("xidpipe_agent_spool_dropped_total") == dropped
    assert s.take_drop_report() == (dropped, dropped) and s.take_drop_report() == (dropped, 0)
    assert _add(s, 100, fault=True, size=400) is not None  # within the reserve


def test_a_fault_beyond_the_reserve_waits_for_room_instead_of_dropping(tmp_path: Path) -> None:
    s = Spool(tmp_path / "spool", Metrics(), max_bytes=4 * KiB, fault_reserve_bytes=1 * KiB, segment_bytes=1 * KiB)
    while s.size < 5 * KiB:
        _add(s, 0, fault=True, size=300)
    result: list[int | None] = []
    t = threading.Thread(target=lambda: result.append(_add(s, 1, fault=True, size=300)))
    t.start()
    t.join(0.5)
    assert t.is_alive() and not result  # blocked, not dropped
    s.read(1000)
    s.ack(s.pending_count())
    t.join(5)
    assert result and result[0] is not None


def test_torn_tail_is_discarded_on_open(tmp_path: Path) -> None:
    s = _spool(tmp_path)
    _add(s, 1)
    _add(s, 2)
    s.close()
    seg = next((tmp_path / "spool").glob("*.seg"))
    with open(seg, "ab") as fh:
        fh.write(b'{"n":3,"t":"t","k":"node","f":fa')
    again = _spool(tmp_path)
    assert [e.number for e in again.read(10)] == [1, 2]
    assert _add(again, 3) == 3


def _corrupt_line(seg: Path, index: int, replacement: bytes) -> bytes:
    lines = seg.read_bytes().splitlines(keepends=True)
    original = lines[index]
    lines[index] = replacement
    seg.write_bytes(b"".join(lines))
    return original


CORRUPTIONS = [
    b'{"n":2,"t":"t","k":"node","f":fa\xff\xfe lse}\n',  # a flipped byte
    b"\0" * 64 + b"\n",  # zeros a power loss left
    b'{"n":"2","t":"t","k":"node","f":false,"id":"r1","v":"x"}\n',  # valid JSON, wrong type
    b"[]\n",
    b'{"n":100000000000000000000000000,"t":"t","k":"node","f":false,"id":"r1","v":"x"}\n',  # 1e26
    b'{"n":1e26,"t":"t","k":"node","f":false,"id":"r1","v":"x"}\n',
]


@pytest.mark.parametrize("bad", CORRUPTIONS, ids=["flipped", "zeros", "wrong-type", "not-an-object", "huge-number",
                                                  "float-number"])
def test_a_corrupt_record_mid_segment_is_moved_aside_on_open(tmp_path: Path, bad: bytes) -> None:
    s = _spool(tmp_path)
    for i in range(5):
        _add(s, i)
    s.close()
    seg = next((tmp_path / "spool").glob("*.seg"))
    _corrupt_line(seg, 1, bad)
    m = Metrics()
    again = Spool(tmp_path / "spool", m)
    assert [e.number for e in again.read(10)] == [1, 3, 4, 5]
    assert m.get("xidpipe_agent_spool_corrupt_total") == 1
    aside = list((tmp_path / "spool" / "corrupt").iterdir())
    assert [p.read_bytes() for p in aside] == [bad]
    assert bad not in seg.read_bytes()
    assert _add(again, 9) == 6


def test_a_corrupt_last_record_does_not_stop_the_spool_opening(tmp_path: Path) -> None:
    s = _spool(tmp_path)
    for i in range(3):
        _add(s, i)
    s.close()
    seg = next((tmp_path / "spool").glob("*.seg"))
    _corrupt_line(seg, 2, b'{"n":3,"t":"t","k":"nod\x00e"}\n')
    m = Metrics()
    again = Spool(tmp_path / "spool", m)
    assert [e.number for e in again.read(10)] == [1, 2]
    assert m.get("xidpipe_agent_spool_corrupt_total") == 1
    assert _add(again, 3) == 3


def test_a_record_that_goes_bad_while_running_is_moved_aside_once_and_reading_goes_on(tmp_path: Path) -> None:
    m = Metrics()
    s = Spool(tmp_path / "spool", m)
    for i in range(4):
        _add(s, i)
    seg = next((tmp_path / "spool").glob("*.seg"))
    original = seg.read_bytes().splitlines(keepends=True)[1]
    _corrupt_line(seg, 1, b"x" * (len(original) - 1) + b"\n")  # same length: the offsets hold
    assert [e.number for e in s.read(10)] == [1, 3, 4]
    assert [e.number for e in s.pending_entries()] == [1, 3, 4]
    assert m.get("xidpipe_agent_spool_corrupt_total") == 1
    assert _add(s, 5) == 5 and [e.number for e in s.read(10)] == [5]


@pytest.mark.parametrize("acked", ["1e26", "100000000000000000000000000", "-5", '"12"', "true", "12.5", "null"])
def test_a_hostile_acknowledged_position_is_not_believed(tmp_path: Path, acked: str) -> None:
    """The spool's state file says how far Kafka acknowledged; a position past any record number (or not
    a number) is read as none: the records are sent again (the worker drops duplicates), never skipped."""
    s = _spool(tmp_path)
    for i in range(3):
        _add(s, i)
    s.close()
    (tmp_path / "spool" / "spool-state.json").write_text(f'{{"acked": {acked}, "written_at": "soon"}}')
    again = _spool(tmp_path)
    assert again.acked == 0 and again.state_written_at is None
    assert [e.number for e in again.read(10)] == [1, 2, 3]
    assert _add(again, 4) == 4
