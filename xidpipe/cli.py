"""The `xidpipe` command line: one sub-command module per feature, registered below."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes `register(subparsers) -> None` and sets `func` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "xidpipe.commands.parse",
    "xidpipe.commands.scan",
    "xidpipe.commands.demo",
    "xidpipe.commands.replay",
    "xidpipe.commands.dev",
    "xidpipe.commands.agent",
    "xidpipe.commands.worker",
    "xidpipe.commands.policy",
    "xidpipe.commands.node",
    "xidpipe.commands.breaker",
    "xidpipe.commands.silence",
    "xidpipe.commands.respond",
    "xidpipe.commands.incidents",
    "xidpipe.commands.gpus",
    "xidpipe.commands.db",
    "xidpipe.commands.serve",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xidpipe",
        description="GPU fault incident pipeline: NVIDIA Xid faults to attributed, classified incidents.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`xidpipe parse big.log | head`): not an error of ours.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
