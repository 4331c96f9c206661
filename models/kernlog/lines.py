"""Text read in pieces → blocks of whole lines, every line held to `MAX_LINE_CHARS`.

Readers that take text in chunks (`xidpipe parse|scan` on a file or standard input) split it here,
so that no line costs more memory than the bound, whatever the input: a longer line is cut to
`MAX_LINE_CHARS` characters and marked with `TRUNCATED_MARK` (the parser reads no record from it),
and the rest of it, up to its newline, is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain

from models.kernlog.limits import MAX_LINE_CHARS, TRUNCATED_MARK


def cut_line(line: str, max_chars: int = MAX_LINE_CHARS) -> str:
    """A line as a reader passes it on: unchanged, or cut and marked when longer than `max_chars`."""
    return line if len(line) <= max_chars else line[:max_chars] + TRUNCATED_MARK


def line_lists(chunks: Iterable[str], max_chars: int = MAX_LINE_CHARS) -> Iterator[list[str]]:
    """The lines (without their newlines) of text read in pieces, each held to `max_chars`, one
    list per piece: `itertools.chain.from_iterable` hands them out with no Python step per line.

    Every piece is handled in slices of at most `max_chars`, so a line that lies inside one slice is
    short enough; only the line carried over from the slice before and the unfinished end are measured.
    """
    tail = ""  # the unfinished line at the end of what was read so far
    cutting = False  # that line was too long and has been passed on cut: drop the rest of it
    for piece in chunks:
        for start in range(0, len(piece), max_chars):
            lines = piece[start:start + max_chars].split("\n")
            if len(lines) == 1:  # no newline in this slice
                if not cutting:
                    tail += lines[0]
                    if len(tail) > max_chars:
                        yield [cut_line(tail, max_chars)]
                        tail, cutting = "", True
                continue
            if cutting:
                del lines[0]
                cutting = False
            else:
                lines[0] = cut_line(tail + lines[0], max_chars)
            tail = lines.pop()
            if lines:
                yield lines
    if tail:
        yield [tail]


def split_lines(chunks: Iterable[str], max_chars: int = MAX_LINE_CHARS) -> Iterator[str]:
    """The lines (without their newlines) of text read in pieces, each held to `max_chars`."""
    return chain.from_iterable(line_lists(chunks, max_chars))
