"""Tables laid out as kubectl and gh lay theirs out: keys whole, free text cut with an ellipsis,
columns left out on a narrow terminal, nothing cut when piped or with -o wide."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from xidpipe.commands.layout import Column, cut, render

COLUMNS = (Column("ID"), Column("NODE"), Column("FAMILY", drop=1), Column("CODES", free=True, min_width=10),
           Column("COUNT", drop=2), Column("AGE"), Column("REASON", free=True, wide=True))
ROWS = [
    ["9af48e8", "gpu-node-02", "memory", "Xid 13, Xid 94, Xid 48, Xid 63", 4, "8d", "GPU memory error seen 4 times"],
    ["55b4bb1", "gpu-node-03", "gpu_lost", "AER, Xid 79, fallen off the bus, driver_error", 1, "8d", None],
]


def test_piped_every_column_whole_and_aligned() -> None:
    lines = render(COLUMNS, ROWS, width=None)
    assert lines[0].split() == ["ID", "NODE", "FAMILY", "CODES", "COUNT", "AGE"]  # the wide column only with -o wide
    assert "Xid 13, Xid 94, Xid 48, Xid 63" in lines[1] and "…" not in "".join(lines)
    assert len({ln.index("AGE") if "AGE" in ln else ln.index("8d") for ln in lines}) == 1  # aligned


@pytest.mark.parametrize("width", [50, 60, 72])
def test_on_a_terminal_rows_fit_keys_whole_free_text_cut(width: int) -> None:
    lines = render(COLUMNS, ROWS, width=width)
    assert all(cell_len(ln) <= width for ln in lines), lines
    assert all(ln.startswith(("ID ", "9af48e8 ", "55b4bb1 ")) for ln in lines)
    assert "gpu-node-02" in lines[1] and "gpu-node-03" in lines[2]
    assert lines[1].rstrip().endswith("8d")  # the last key column is there, whole
    assert "…" in lines[2]  # the longer codes are cut


def test_columns_go_least_useful_first_and_come_back_with_room() -> None:
    assert render(COLUMNS, ROWS, width=60)[0].split() == ["ID", "NODE", "FAMILY", "CODES", "COUNT", "AGE"]
    assert render(COLUMNS, ROWS, width=50)[0].split() == ["ID", "NODE", "FAMILY", "CODES", "AGE"]  # COUNT first
    assert render(COLUMNS, ROWS, width=45)[0].split() == ["ID", "NODE", "CODES", "AGE"]
    # Too narrow even for the keys: nothing more is given up and no key is cut.
    narrow = render(COLUMNS, ROWS, width=20)
    assert narrow[1].split()[:2] == ["9af48e8", "gpu-node-02"]


def test_wide_adds_its_columns_and_cuts_nothing() -> None:
    lines = render(COLUMNS, ROWS, width=60, wide=True)
    assert lines[0].split()[-1] == "REASON" and "GPU memory error seen 4 times" in lines[1]
    assert lines[2].rstrip().endswith("-")  # nothing is written as -


def test_a_cell_is_one_line_and_never_a_terminal_command() -> None:
    lines = render((Column("A"), Column("B", free=True)), [["x\ny", "clear\x1b[2J\ttab\x9b"]], width=None)
    assert len(lines) == 2 and "\x1b" not in lines[1] and "\x9b" not in lines[1]
    assert lines[1].split() == ["x\\u000ay", "clear\\u001b[2J\\u0009tab\\u009b"]


def test_wide_characters_are_counted_as_the_terminal_shows_them() -> None:
    assert cut("名前名前名前", 7) == "名前名…" and cell_len(cut("名前名前名前", 7)) == 7
    assert cut("short", 10) == "short" and cut("a long text", 6) == "a lon…"
    lines = render((Column("N"), Column("T", free=True, min_width=4)), [["1", "名前名前名前名前"]], width=12)
    assert all(cell_len(ln) <= 12 for ln in lines)
