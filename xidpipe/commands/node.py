"""`xidpipe node release NODE`: lift xidpipe's cordon, taint and GPUHealthy condition, recording who and why.

It returns the node to service as the remediation loop does (`respond.remediation.returns`): the hooks
of what else held the node run after the release, and a remediation loop of the node is cancelled.

xidpipe releases only cordons it set (the node carries `xidpipe.io/cordoned-at`); any other cordon
is refused with the reason. With no cluster configured the command is refused (exit 2), unless
`--dry-run` asks for a recorded dry run. Exit status: 0 released (or a dry run), 2 no cluster or a
bad policy, 3 the cluster failed the change, 4 refused.
"""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from xidpipe.commands.cluster_options import cluster_parent, record_database, require_cluster, settings_from_args
from xidpipe.commands.exits import EXIT_OK, Refused, Unavailable, UsageError
from xidpipe.commands.options import node_name


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("node", help="act on a node (release xidpipe's cordon)",
                                                description="Node actions.", parents=[cluster_parent()])
    nsub = p.add_subparsers(dest="node_command", metavar="SUBCOMMAND", required=True)
    rel = nsub.add_parser(
        "release", help="lift xidpipe's cordon of a node", parents=[cluster_parent()],
        description="Lift xidpipe's cordon, taint and GPUHealthy=False condition of NODE, and record who "
        "released it and why (node annotations, an Event, the action record). Refuses when the cordon was "
        "not set by xidpipe, or was set for another incident than --incident. Exit status: 0 released, "
        "2 no cluster configured (give --kubeconfig, --in-cluster or --dry-run), 3 failed, 4 refused.")
    rel.add_argument("node", metavar="NODE", type=node_name)
    rel.add_argument("--incident", help="release only if xidpipe cordoned the node for this incident")
    rel.add_argument("--reason", required=True, help="why the node is returned to service")
    rel.add_argument("--by", default=None, help="who releases it (default: $USER, the login name)")
    rel.set_defaults(func=run_release)


def run_release(args: argparse.Namespace) -> int:
    from models.cordon_policy import PolicyError
    from respond.cordon.runtime import api_client, build_executor
    from respond.remediation.returns import return_to_service
    from service.config import ServiceSettings
    from xidpipe.commands.startup import load, start_logging, wait_for_kube

    base = load(ServiceSettings)
    start_logging(base)
    settings = settings_from_args(args)
    require_cluster(settings)
    try:
        api = api_client(settings)
        wait_for_kube(api, base.startup_deadline_s)
        executor = build_executor(settings, api=api, database_url=record_database(args))
    except PolicyError as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # the kubeconfig cannot be loaded: kubernetes' ConfigException and OSError
        if type(exc).__name__ != "ConfigException" and not isinstance(exc, OSError):
            raise
        raise UsageError(f"cannot load the cluster configuration: {exc}") from None
    by = args.by or getpass.getuser()
    # The same return to service as the remediation loop's: the release, then what else held the node
    # (GPU quarantine's rules); a remediation loop of the node sees the release and stops.
    result = return_to_service(executor, args.node, by=by, reason=args.reason, incident_id=args.incident)
    if result.outcome == "refused":
        raise Refused(f"refused: {result.reason}")
    if result.outcome == "failed":
        raise Unavailable(f"failed: {result.reason}")
    prefix = "dry run: " if result.dry_run else ""
    print(f"{prefix}{result.reason}" + (f" (changed: {', '.join(result.changes)})" if result.changes else ""))
    return EXIT_OK
