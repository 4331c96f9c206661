"""Reading kernel-log input files robustly: any bytes, any size, clear errors.

A named input must be a regular file (or `-`, standard input): a FIFO would block the command until
someone writes to it and `/dev/zero` never ends, so both are refused before a byte is read (the file
is opened without blocking and checked on its descriptor, so it cannot be swapped in between). Lines
are held to MAX_LINE_CHARS (`models.kernlog.lines`) and an input to MAX_INPUT_BYTES, so no input
costs unbounded memory or time.
"""

from __future__ import annotations

import argparse
import io
import os
import stat
import sys
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from itertools import chain
from typing import Any, BinaryIO

from models.kernlog import ParseOptions
from models.kernlog.clock import YEAR_MAX, YEAR_MIN
from models.kernlog.lines import line_lists

READ_CHARS = 64 * 1024
MAX_INPUT_BYTES = 64 * 1024**3  # far past any kernel log; an endless pipe (`cat /dev/zero |`) stops here


class InputError(Exception):
    """An input cannot be read; the message names the file and the reason."""


def open_input(path: str) -> BinaryIO:
    if path == "-":
        if sys.stdin is None or sys.stdin.closed:  # `xidpipe scan - <&-`
            raise InputError("cannot read standard input: it is closed")
        return sys.stdin.buffer
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, to be refused
    except FileNotFoundError:
        raise InputError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"cannot read {path}: it is a directory") from None
    except PermissionError:
        raise InputError(f"cannot read {path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise InputError(f"cannot read {path}: it is a directory")
        raise InputError(f"cannot read {path}: not a regular file (a FIFO, socket or device; use - for a pipe)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


class _Bounded(io.RawIOBase):
    """A binary stream that raises InputError once more than `limit` bytes were read from it."""

    def __init__(self, raw: BinaryIO, path: str, limit: int) -> None:
        self._raw, self._path, self._limit, self._read = raw, path, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        self._read += n or 0
        if self._read > self._limit:
            raise InputError(f"cannot read {self._path}: more than {self._limit} bytes")
        return int(n or 0)


def iter_lines(path: str, max_bytes: int = MAX_INPUT_BYTES) -> Iterator[str]:
    """Lines of a file as text; invalid UTF-8 is replaced, never fatal; a line longer than
    MAX_LINE_CHARS is cut and marked (`models.kernlog.lines`), and reading stops with InputError past
    `max_bytes`, so no input costs unbounded memory or time."""
    return chain.from_iterable(_line_lists(path, max_bytes))


def _line_lists(path: str, max_bytes: int) -> Iterator[list[str]]:
    stream = open_input(path)
    bounded = io.BufferedReader(_Bounded(stream, path, max_bytes), READ_CHARS)
    text = io.TextIOWrapper(bounded, encoding="utf-8", errors="replace")
    try:
        yield from line_lists(iter(partial(text.read, READ_CHARS), ""))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if not (sys.stdin is not None and stream is sys.stdin.buffer):
            stream.close()


def add_year_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--year",
        type=_year,
        default=None,
        help="year for syslog timestamps that carry none (default: the current year, "
        "or the year before for dates more than two days ahead)",
    )


def _year(text: str) -> int:
    try:
        year = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a year: {text!r}") from None
    if not YEAR_MIN <= year <= YEAR_MAX:
        raise argparse.ArgumentTypeError(f"year {year} out of range ({YEAR_MIN}-{YEAR_MAX})")
    return year


def parse_options(year: int | None) -> ParseOptions:
    return ParseOptions(year=year, now=datetime.now().astimezone())
