import json
from pathlib import Path

from agents.cursors import CursorTracker, later_cursor


def _c(seq: int) -> dict[str, object]:
    return {"boot_id": "b", "seq": seq}


def test_cursor_advances_only_through_acknowledged_records(tmp_path: Path) -> None:
    path = tmp_path / "cursor.json"
    t = CursorTracker(path)
    t.note(None, _c(1))  # filtered, nothing pending before it
    t.note(1, _c(2))  # published as spool record 1
    t.note(None, _c(3))
    t.note(None, _c(4))
    t.note(2, _c(5))
    t.note(None, _c(6))
    t.flush()
    assert json.loads(path.read_text()) == _c(1)
    t.acked_through(1)
    assert json.loads(path.read_text()) == _c(4)
    t.acked_through(2)
    assert json.loads(path.read_text()) == _c(6)
    assert t.load() == _c(6)


def test_later_cursor() -> None:
    assert later_cursor(_c(5), _c(7)) == _c(7)
    assert later_cursor({"boot_id": "a", "seq": 9}, _c(7)) == {"boot_id": "a", "seq": 9}
    assert later_cursor({"inode": 1, "offset": 10}, {"inode": 1, "offset": 4}) == {"inode": 1, "offset": 10}
    a = {"cursor": "s=ab12;i=1f;b=x"}
    b = {"cursor": "s=ab12;i=2a;b=x"}
    assert later_cursor(a, b) == b
    assert later_cursor(None, b) == b
