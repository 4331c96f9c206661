"""`xidpipe demo`: xidpipe on the bundled sample cluster, with embedded defaults."""

from __future__ import annotations

import argparse
from importlib import resources
from typing import Any

from models.scan import scan
from xidpipe.commands.scan import collect, print_table

SAMPLE_YEAR = 2025


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run xidpipe on the bundled sample cluster logs",
        description="Scan the kernel logs of the bundled sample cluster (several GPU nodes with "
        "application faults, a failing GPU, a GPU falling off the bus and an Xid storm) and print "
        "the classified incidents.",
    )
    p.set_defaults(func=run)


def sample_files() -> list[str]:
    root = resources.files("xidpipe").joinpath("samples", "cluster")
    return sorted(str(p) for p in root.iterdir() if p.name.endswith(".log"))


def run(args: argparse.Namespace) -> int:
    files = sample_files()
    print(f"Scanning {len(files)} sample node logs:")
    for f in files:
        print(f"  {f}")
    print()
    incidents = scan(collect(files, None, SAMPLE_YEAR))
    print_table(incidents)
    return 0
