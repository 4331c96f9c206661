"""`xidpipe node release NODE`: lift xidpipe's cordon, taint and GPUHealthy condition, and delete its
DeviceTaintRules of the node's GPUs (`--gpu UUID`: that GPU's alone), recording who and why.

It returns the node to service as the remediation loop does: its cordon and its GPUs' quarantines
lifted (`respond.quarantine.release.release_node`), then the return hooks of what else held the node
(`respond.remediation.returns`); a remediation loop of the node sees the release and stops.

xidpipe releases only cordons it set (the node carries `xidpipe.io/cordoned-at`) and rules it made as
it made them; any other is refused with the reason. With no cluster configured the command is refused (exit 2), unless
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
        "release", help="lift xidpipe's cordon of a node and its GPUs' quarantines", parents=[cluster_parent()],
        description="Lift xidpipe's cordon, taint and GPUHealthy=False condition of NODE, delete xidpipe's "
        "DeviceTaintRules of its GPUs, and record who released them and why (node annotations, an Event, the "
        "action record). With --gpu, only that GPU's quarantine. Refuses when the cordon was not set by xidpipe, "
        "a rule was changed by someone else, or either is another incident's than --incident. Exit status: "
        "0 released, 2 no cluster configured (give --kubeconfig, --in-cluster or --dry-run), 3 failed, 4 refused.")
    rel.add_argument("node", metavar="NODE", type=node_name)
    rel.add_argument("--incident", help="release only what xidpipe did to the node for this incident")
    rel.add_argument("--gpu", metavar="UUID", help="release only the quarantine of this GPU of the node "
                     "(its DeviceTaintRule), not the node's cordon")
    rel.add_argument("--reason", required=True, help="why the node is returned to service")
    rel.add_argument("--by", default=None, help="who releases it (default: $USER, the login name)")
    rel.set_defaults(func=run_release)


def run_release(args: argparse.Namespace) -> int:
    from models.cordon_policy import PolicyError
    from respond.cordon.runtime import api_client, build_executor
    from respond.remediation.returns import Returned, run_return_hooks
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
    from respond.quarantine.release import release_node

    by = args.by or getpass.getuser()
    try:
        result = release_node(executor, args.node, by=by, reason=args.reason, incident_id=args.incident,
                              gpu=args.gpu)
        if not args.gpu and result.outcome == "done" and not result.dry_run:
            run_return_hooks(Returned(node=args.node, incident_id=result.incident_id, gpu="", by=by,
                                      reason=args.reason))
    finally:
        close = getattr(executor.nodes, "close", None)
        if close is not None:
            close()
    if result.outcome == "refused":
        raise Refused(f"refused: {result.reason}")
    if result.outcome == "failed":
        raise Unavailable(f"failed: {result.reason}")
    prefix = "dry run: " if result.dry_run else ""
    print(f"{prefix}{result.reason}" + (f" (changed: {', '.join(result.changes)})" if result.changes else ""))
    return EXIT_OK
