"""Tables for people, laid out as `kubectl get` and `gh` lay theirs out.

A table has key columns (ids, names, times, counts) and free-text columns (codes, reasons). On a
terminal the table fits its width (`COLUMNS`, else the terminal's): a key is never cut or wrapped; free
text is cut with an ellipsis, down to its column's minimum; if the keys still do not fit, the columns
marked droppable go, least useful first. `-o wide` adds the wide columns and cuts nothing. Piped or
redirected the table is plain columns: every column, nothing cut, one row a line, for `grep`, `awk`
and `cut`. Headers are upper case and plain, no colour, no box.

A cell is one line: a newline, a tab or any other control character in it is written as a visible
`\\uXXXX` escape, so text from a node can neither break a row nor reach the terminal as a command.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rich.cells import cell_len, get_character_cell_size

GAP = "  "  # between columns
ELLIPSIS = "…"
_CONTROL = {c: f"\\u{c:04x}" for c in (*range(0x00, 0x20), *range(0x7F, 0xA0))}


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    free: bool = False  # free text: cut with an ellipsis to fit the terminal
    drop: int = 0  # > 0: left out on a narrow terminal, the highest first; 0: always shown
    wide: bool = False  # only with `-o wide`
    min_width: int = 12  # a free-text column is cut down to this before a column is dropped


def cell(value: Any) -> str:
    """How a value is written in a cell: `-` for nothing, control characters escaped."""
    if value is None or value == "":
        return "-"
    return str(value).translate(_CONTROL)


def cut(text: str, width: int) -> str:
    """`text` cut to `width` terminal cells, ending with an ellipsis when anything was cut."""
    if cell_len(text) <= width:
        return text
    if width <= 0:
        return ""
    out, used = [], 0
    for ch in text:
        size = get_character_cell_size(ch)
        if used + size > width - 1:
            break
        out.append(ch)
        used += size
    return "".join(out).rstrip() + ELLIPSIS


def _fit(columns: Sequence[Column], natural: list[int], width: int) -> tuple[list[int], list[int]]:
    """The columns kept (indexes) and their widths so the row fits `width`, as far as keys allow."""
    kept = list(range(len(columns)))
    while True:
        widths = _share(columns, natural, kept, width)
        if widths is not None:
            return kept, widths
        droppable = [i for i in kept if columns[i].drop > 0]
        if not droppable:  # the keys alone are wider than the terminal: nothing more to give up
            return kept, [natural[i] if not columns[i].free else min(natural[i], columns[i].min_width)
                          for i in kept]
        kept.remove(max(droppable, key=lambda i: (columns[i].drop, i)))


def _share(columns: Sequence[Column], natural: list[int], kept: list[int], width: int) -> list[int] | None:
    """Widths of the kept columns within `width` (free text shrunk, never below its minimum), or None."""
    room = width - len(GAP) * (len(kept) - 1) - sum(natural[i] for i in kept if not columns[i].free)
    free = [i for i in kept if columns[i].free]
    if sum(min(natural[i], columns[i].min_width) for i in free) > room:
        return None
    given = {i: min(natural[i], columns[i].min_width) for i in free}
    room -= sum(given.values())
    # The room left goes to the free columns that want more, evenly, the narrowest needs met first.
    wanting = sorted((i for i in free if natural[i] > given[i]), key=lambda i: natural[i] - given[i])
    for n, i in enumerate(wanting):
        extra = min(natural[i] - given[i], room // (len(wanting) - n))
        given[i] += extra
        room -= extra
    return [given[i] if columns[i].free else natural[i] for i in kept]


def render(columns: Sequence[Column], rows: Iterable[Sequence[Any]], *, width: int | None,
           wide: bool = False) -> list[str]:
    """The table's lines. `width`: the terminal's (None: piped, nothing cut); `wide`: `-o wide`."""
    shown = [i for i, c in enumerate(columns) if wide or not c.wide]
    cols = [columns[i] for i in shown]
    body = [[cell(r[i]) for i in shown] for r in rows]
    natural = [max([cell_len(c.header), *(cell_len(r[n]) for r in body)]) for n, c in enumerate(cols)]
    if width is None or wide:
        kept, widths = list(range(len(cols))), natural
    else:
        kept, widths = _fit(cols, natural, width)
    lines = []
    for texts in ([c.header for c in cols], *body):
        parts = [_pad(cut(texts[i], w) if cols[i].free else texts[i], w) for i, w in zip(kept, widths, strict=True)]
        lines.append(GAP.join(parts).rstrip())
    return lines


def _pad(text: str, width: int) -> str:
    return text + " " * max(0, width - cell_len(text))


def terminal_width(out: TextIO | None = None) -> int | None:
    """The width to fit tables to: the terminal's (`COLUMNS` first), or None when `out` is no terminal."""
    out = out or sys.stdout
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size().columns


def print_table(columns: Sequence[Column], rows: Iterable[Sequence[Any]], *, wide: bool = False,
                out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for line in render(columns, rows, width=terminal_width(out), wide=wide):
        print(line, file=out)
