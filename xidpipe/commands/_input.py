"""Reading kernel-log input files robustly: any bytes, any size, clear errors."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from itertools import chain
from typing import BinaryIO

from models.kernlog import ParseOptions
from models.kernlog.lines import line_lists

READ_CHARS = 64 * 1024


class InputError(Exception):
    """An input cannot be read; the message names the file and the reason."""


def open_input(path: str) -> BinaryIO:
    if path == "-":
        if sys.stdin is None or sys.stdin.closed:  # `xidpipe scan - <&-`
            raise InputError("cannot read standard input: it is closed")
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"cannot read {path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"cannot read {path}: it is a directory") from None
    except PermissionError:
        raise InputError(f"cannot read {path}: permission denied") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def iter_lines(path: str) -> Iterator[str]:
    """Lines of a file as text; invalid UTF-8 is replaced, never fatal; a line longer than
    MAX_LINE_CHARS is cut and marked (`models.kernlog.lines`), so no input costs unbounded memory."""
    return chain.from_iterable(_line_lists(path))


def _line_lists(path: str) -> Iterator[list[str]]:
    stream = open_input(path)
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace")
    try:
        yield from line_lists(iter(partial(text.read, READ_CHARS), ""))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if sys.stdin is not None and stream is sys.stdin.buffer:
            text.detach()
        else:
            text.close()


def add_year_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--year",
        type=int,
        default=None,
        help="year for syslog timestamps that carry none (default: the current year, "
        "or the year before for dates more than two days ahead)",
    )


def parse_options(year: int | None) -> ParseOptions:
    return ParseOptions(year=year, now=datetime.now().astimezone())
