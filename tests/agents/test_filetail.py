import os
import time
from collections.abc import Iterator
from pathlib import Path

from agents.kernlog.base import SourceGap, SourceItem, SourceLine
from agents.kernlog.filetail import FileSource

XID = "Nov 29 10:00:00 gpu1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def _take(it: Iterator[SourceItem | None], n: int, deadline_s: float = 10.0) -> list[SourceItem]:
    out: list[SourceItem] = []
    end = time.monotonic() + deadline_s
    while len(out) < n:
        assert time.monotonic() < end, f"only {len(out)} of {n} items"
        item = next(it)
        if item is not None:
            out.append(item)
    return out


def _drain_idle(it: Iterator[SourceItem | None]) -> None:
    assert next(it) is None


def _write(path: Path, lines: list[str], mode: str = "a") -> None:
    with open(path, mode) as fh:
        fh.write("".join(line + "\n" for line in lines))


def test_lines_carry_offset_and_content_hash(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    _write(log, ["first", XID, "third"], "w")
    items = [i for i in FileSource(log, None, follow=False).items() if i is not None]
    assert [i.message for i in items if isinstance(i, SourceLine)] == ["first", XID, "third"]
    xid = items[1]
    assert isinstance(xid, SourceLine) and xid.file_offset == len("first\n")
    assert xid.record_id == f"file:{xid.content_hash}:6"
    assert xid.cursor["offset"] == len("first\n") + len(XID) + 1


def test_partial_line_waits_for_its_end(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("complete\npart")
    it = FileSource(log, None).items()
    assert [i.message for i in _take(it, 1)] == ["complete"]  # type: ignore[union-attr]
    _drain_idle(it)
    with open(log, "a") as fh:
        fh.write("ial\n")
    assert [i.message for i in _take(it, 1)] == ["partial"]  # type: ignore[union-attr]


def test_a_file_read_once_ends_at_its_last_line_without_a_newline(tmp_path: Path) -> None:
    """Not followed, nobody will finish the last line: it is read as it is, with the record id it would
    have with its newline (so a later follow of the finished line does not count it twice)."""
    log = tmp_path / "kern.log"
    log.write_text(f"first\n{XID}")
    items = [i for i in FileSource(log, None, follow=False).items() if isinstance(i, SourceLine)]
    assert [i.message for i in items] == ["first", XID]
    log.write_text(f"first\n{XID}\n")
    finished = [i for i in FileSource(log, None, follow=False).items() if isinstance(i, SourceLine)]
    assert finished[1].record_id == items[1].record_id and items[1].cursor["offset"] == len(f"first\n{XID}")


def test_rotation_by_rename_drains_old_file_then_follows_new(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    _write(log, ["a1", "a2"], "w")
    it = FileSource(log, None).items()
    _take(it, 2)
    _drain_idle(it)
    _write(log, ["a3"])  # written just before rotation, not yet read
    os.rename(log, tmp_path / "kern.log.1")
    _write(log, ["b1", "b2"], "w")
    got = _take(it, 3)
    assert [i.message for i in got] == ["a3", "b1", "b2"]  # type: ignore[union-attr]
    assert got[1].cursor["offset"] == 3 and got[1].cursor["inode"] == os.stat(log).st_ino


def test_copytruncate_restarts_at_zero_and_reports_it(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    _write(log, ["old line one", "old line two"], "w")
    it = FileSource(log, None).items()
    _take(it, 2)
    _drain_idle(it)
    with open(log, "r+") as fh:  # what logrotate's copytruncate does after copying
        fh.truncate(0)
    _write(log, ["new"])
    got = _take(it, 2)
    assert isinstance(got[0], SourceGap) and got[0].reason == "truncated"
    assert isinstance(got[1], SourceLine) and got[1].message == "new" and got[1].file_offset == 0


def test_restart_resumes_from_cursor_and_finds_the_rotated_file(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    _write(log, ["a1", "a2", "a3"], "w")
    first = [i for i in FileSource(log, None, follow=False).items() if i is not None]
    cursor = first[1].cursor  # handled through a2
    os.rename(log, tmp_path / "kern.log.1")
    _write(log, ["b1"], "w")
    again = [i for i in FileSource(log, cursor, follow=False).items() if i is not None]
    assert [i.message for i in again] == ["a3", "b1"]  # type: ignore[union-attr]


def test_replay_rate_paces_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    _write(log, [f"line {i}" for i in range(21)], "w")
    began = time.monotonic()
    items = [i for i in FileSource(log, None, follow=False, replay_rate=100).items() if i is not None]
    elapsed = time.monotonic() - began
    assert len(items) == 21
    assert 0.18 <= elapsed < 2.0


def test_filtered_lines_come_out_in_bulk_with_exact_positions(tmp_path: Path) -> None:
    from agents.kernlog.base import SourceSkip
    from agents.kernlog.prefilter import DEFAULT_FAULT_PATTERNS, DEFAULT_KEEP_PATTERNS, PreFilter

    f = PreFilter(DEFAULT_KEEP_PATTERNS, DEFAULT_FAULT_PATTERNS)
    log = tmp_path / "kern.log"
    noise = [f"kernel: eth0: link flap {i}" for i in range(3)]
    _write(log, [noise[0], XID, noise[1], noise[2]], "w")
    src = FileSource(log, None, follow=True, line_filter=lambda m: f(m).keep, block_filter=f.may_match)
    it = src.items()
    got = _take(it, 3)
    assert isinstance(got[0], SourceSkip) and got[0].messages == [noise[0]]
    assert got[0].cursor["offset"] == len(noise[0]) + 1
    assert isinstance(got[1], SourceLine) and got[1].message == XID and got[1].file_offset == len(noise[0]) + 1
    assert isinstance(got[2], SourceSkip) and got[2].messages == noise[1:]
    assert got[2].cursor["offset"] == log.stat().st_size
    _drain_idle(it)
    _write(log, ["kernel: usb 1-1: new device", "kernel: usb 1-1: gone"])  # a block with no GPU line
    (block,) = _take(it, 1)
    assert isinstance(block, SourceSkip) and len(block.messages) == 2
    assert block.cursor["offset"] == log.stat().st_size
    src.close()


def test_every_piece_of_an_overlong_line_is_marked_and_parses_as_no_record(tmp_path: Path) -> None:
    from agents.kernlog.filetail import CHUNK
    from models.kernlog import KernelLogParser
    from models.kernlog.limits import MAX_LINE_CHARS, TRUNCATED_MARK

    log = tmp_path / "kern.log"
    # A line longer than a read, whose last piece reads like a fault on its own; one that fits a
    # read but not the bound; then a real fault.
    crafted = "x" * (CHUNK + MAX_LINE_CHARS // 2) + XID
    long = "y" * (MAX_LINE_CHARS + 1) + XID
    _write(log, [crafted, long, XID], "w")
    items = [i for i in FileSource(log, None, follow=False).items() if isinstance(i, SourceLine)]
    messages = [i.message for i in items]
    assert messages[-1] == XID and len(messages) >= 4
    assert all(m.endswith(TRUNCATED_MARK) and len(m) <= MAX_LINE_CHARS + len(TRUNCATED_MARK) for m in messages[:-1])
    assert items[-1].cursor["offset"] == len(crafted) + len(long) + len(XID) + 3
    assert [r.line for r in KernelLogParser().parse(messages)] == [len(messages)]


def test_lines_user_space_wrote_are_dropped_counted_and_passed_over(tmp_path: Path) -> None:
    """`logger -t alice 'NVRM: Xid ...'` or an ssh login name in syslog is no driver message."""
    log = tmp_path / "syslog"
    foreign = ["Nov 29 10:00:00 gpu1 alice: " + XID[XID.index("NVRM"):],
               "Nov 29 10:00:01 gpu1 sshd[12]: Invalid user " + XID[XID.index("NVRM"):]]
    _write(log, [foreign[0], XID, foreign[1]], "w")
    dropped: list[int] = []
    source = FileSource(log, None, follow=False, line_filter=lambda m: "NVRM" in m,
                        on_foreign=lambda: dropped.append(1))
    items = [i for i in source.items() if i is not None]
    assert [i.message for i in items if isinstance(i, SourceLine)] == [XID]
    assert len(dropped) == 2
    assert items[-1].cursor["offset"] == log.stat().st_size
