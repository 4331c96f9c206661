"""What the commands print for people: tables that fit the terminal, Markdown rendered as sections,
colour only on a terminal (and never with `NO_COLOR` set). Piped or redirected, the same tables come
out as plain columns, one row a line and nothing wrapped, for `grep`, `awk` and `cut`.
"""

from __future__ import annotations

import difflib
import io
import sys
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Console, RenderableType
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

_PLAIN_WIDTH = 100_000  # piped: no wrapping, a row stays one line
_PROSE_WIDTH = 100  # piped: prose and Markdown wrap at this width


def _is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def emit(renderable: RenderableType, out: TextIO | None = None, *, prose: bool = False) -> None:
    """Print one rich renderable: styled on a terminal, plain text with trailing blanks cut otherwise."""
    out = out or sys.stdout
    if _is_tty(out):
        Console(file=out, highlight=False, emoji=False).print(renderable)
        return
    buf = io.StringIO()
    Console(file=buf, width=_PROSE_WIDTH if prose else _PLAIN_WIDTH, no_color=True, force_terminal=False,
            highlight=False, emoji=False).print(renderable)
    out.write("".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines()))


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None,
          title: str | None = None) -> None:
    """A table; on a terminal it is fitted to the width (long cells wrap), piped it is plain columns."""
    t = Table(box=box.SIMPLE_HEAD if _is_tty(out or sys.stdout) else None, header_style="bold", pad_edge=False,
              show_edge=False, title=title, title_justify="left", title_style="bold")
    for h in header:
        t.add_column(h, overflow="fold")
    for r in rows:
        t.add_row(*(Text("-" if c is None or c == "" else str(c)) for c in r))
    emit(t, out)


def markdown(text: str, out: TextIO | None = None) -> None:
    """Markdown as sections: headings, lists and tables drawn for the terminal, not `#` and `|`."""
    emit(Markdown(text), out, prose=True)


def heading(text: str, out: TextIO | None = None) -> None:
    emit(Text("\n" + text, style="bold underline"), out, prose=True)


def close_matches(value: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` for a near miss, else an empty string."""
    near = difflib.get_close_matches(value, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(n) for n in near)}?)" if near else ""


def enum_arg(name: str, choices: Sequence[str]) -> Any:
    """argparse `type=` for a closed set: a value outside it is refused, naming the near miss and the set."""
    import argparse

    def parse(text: str) -> str:
        if text in choices:
            return text
        raise argparse.ArgumentTypeError(f"unknown {name} {text!r}{close_matches(text, choices)}; "
                                         f"one of: {', '.join(choices)}")

    parse.__name__ = name
    return parse
