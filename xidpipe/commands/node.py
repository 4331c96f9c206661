"""`xidpipe node release NODE`: lift xidpipe's cordon, taint and GPUHealthy condition, recording who and why.

xidpipe releases only cordons it set (the node carries `xidpipe.io/cordoned-at`); any other cordon
is refused with the reason. Exit status: 0 released (or a dry run), 1 refused, 2 failed.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from xidpipe.commands.cluster_options import add_cluster_options, settings_from_args

EXIT_OK, EXIT_REFUSED, EXIT_FAILED = 0, 1, 2


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("node", help="act on a node (release xidpipe's cordon)",
                                                description="Node actions.")
    nsub = p.add_subparsers(dest="node_command", metavar="SUBCOMMAND", required=True)
    rel = nsub.add_parser(
        "release", help="lift xidpipe's cordon of a node",
        description="Lift xidpipe's cordon, taint and GPUHealthy=False condition of NODE, and record who "
        "released it and why (node annotations, an Event, the action record). Refuses when the cordon was "
        "not set by xidpipe, or was set for another incident than --incident. Exit status: 0 released, "
        "1 refused, 2 failed.")
    rel.add_argument("node", metavar="NODE")
    rel.add_argument("--incident", help="release only if xidpipe cordoned the node for this incident")
    rel.add_argument("--reason", required=True, help="why the node is returned to service")
    rel.add_argument("--by", default=None, help="who releases it (default: the login name)")
    add_cluster_options(rel)
    rel.set_defaults(func=run_release)


def run_release(args: argparse.Namespace) -> int:
    from models.cordon_policy import PolicyError
    from respond.cordon.runtime import build_executor

    settings = settings_from_args(args)
    try:
        executor = build_executor(settings)
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_FAILED
    by = args.by or getpass.getuser()
    result = executor.release(args.node, by=by, reason=args.reason, incident_id=args.incident)
    if result.outcome == "refused":
        print(f"xidpipe node release: refused: {result.reason}", file=sys.stderr)
        return EXIT_REFUSED
    if result.outcome == "failed":
        print(f"xidpipe node release: failed: {result.reason}", file=sys.stderr)
        return EXIT_FAILED
    prefix = "dry run: " if result.dry_run else ""
    print(f"{prefix}{result.reason}" + (f" (changed: {', '.join(result.changes)})" if result.changes else ""))
    return EXIT_OK
