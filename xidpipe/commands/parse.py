"""`xidpipe parse [FILE|-]`: one JSON object per recognised record (a public contract)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from models.kernlog import KernelLogParser
from xidpipe.commands._input import InputError, add_year_option, iter_lines, parse_options
from xidpipe.commands.exits import EXIT_OK, UsageError


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "parse",
        help="print recognised GPU fault records as JSON Lines",
        description="Parse a kernel log (dmesg, journalctl -k in any output mode, syslog, kern.log, "
        "/dev/kmsg records) and print one JSON object per recognised GPU fault or identity record.",
    )
    p.add_argument("file", nargs="?", default="-", help="input file, or - for standard input (default)")
    add_year_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    parser = KernelLogParser(parse_options(args.year))
    out = sys.stdout
    try:
        for record in parser.parse(iter_lines(args.file)):
            out.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
    except InputError as exc:
        raise UsageError(str(exc)) from None
    out.flush()
    return EXIT_OK
