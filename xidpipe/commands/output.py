"""What the commands print for people: tables that fit the terminal, Markdown rendered as sections,
colour only on a terminal (and never with `NO_COLOR` set). Piped or redirected, the same tables come
out as plain columns, one row a line and nothing wrapped, for `grep`, `awk` and `cut`.

Text from nodes (process names, driver messages, file names) may hold control characters: an escape
sequence can clear the screen, retitle the terminal, or plant a hidden link (OSC 8). Everything a
command writes to standard output and every error it prints go through `safe()`, which writes each C0
and C1 control character (but newline and tab), DEL, and the bidirectional-text overrides as a visible
`\\uXXXX` escape, the form a JSON string reads too, so JSON output stays valid JSON. `terminal_safe()`
puts a filter on standard output for the length of a command; the styling rich adds on a terminal is
written past it.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Console, RenderableType
from rich.markdown import Markdown
from rich.table import Table
from rich.text import Text

_PLAIN_WIDTH = 100_000  # piped: no wrapping, a row stays one line
_PROSE_WIDTH = 100  # piped: prose and Markdown wrap at this width


_KEPT = "\n\t"
_UNSAFE = [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
           *range(0x2066, 0x206A)]
_ESCAPES = {c: f"\\u{c:04x}" for c in _UNSAFE if chr(c) not in _KEPT}


def safe(text: str) -> str:
    """`text` with its control characters written as visible `\\uXXXX` escapes (newline and tab kept)."""
    return text.translate(_ESCAPES)


class SafeStream(io.TextIOBase):
    """A text stream that passes everything written through `safe()` to the stream it wraps."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(safe(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    def isatty(self) -> bool:
        return _is_tty(self.raw)

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.raw, "encoding", "utf-8"))

    def __getattr__(self, name: str) -> Any:  # buffer, line_buffering, reconfigure, name, ...: the stream's own
        return getattr(self.raw, name)


@contextlib.contextmanager
def terminal_safe() -> Iterator[None]:
    """Standard output filtered by `safe()` while the block runs (not twice when already filtered)."""
    before = sys.stdout
    if before is None or isinstance(before, SafeStream):
        yield
        return
    sys.stdout = SafeStream(before)
    try:
        yield
    finally:
        if isinstance(sys.stdout, SafeStream) and sys.stdout.raw is before:
            sys.stdout = before


def _raw(out: TextIO) -> TextIO:
    """The stream under a `SafeStream` (rich's own styling must pass; its text is made safe before)."""
    return out.raw if isinstance(out, SafeStream) else out


def _is_tty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def emit(renderable: RenderableType, out: TextIO | None = None, *, prose: bool = False) -> None:
    """Print one rich renderable: styled on a terminal, plain text with trailing blanks cut otherwise."""
    out = _raw(out or sys.stdout)
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
              show_edge=False, title=safe(title) if title else None, title_justify="left", title_style="bold")
    for h in header:
        t.add_column(safe(h), overflow="fold")
    for r in rows:
        t.add_row(*(Text("-" if c is None or c == "" else safe(str(c))) for c in r))
    emit(t, out)


def markdown(text: str, out: TextIO | None = None) -> None:
    """Markdown as sections: headings, lists and tables drawn for the terminal, not `#` and `|`."""
    emit(Markdown(safe(text)), out, prose=True)


def heading(text: str, out: TextIO | None = None) -> None:
    emit(Text("\n" + safe(text), style="bold underline"), out, prose=True)


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
