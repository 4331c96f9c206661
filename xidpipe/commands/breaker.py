"""`xidpipe breaker status|reset`: the cordon circuit breaker.

Once tripped (too many nodes of a pool, or too many cordons in an hour), no automatic cordon
happens until an operator resets it here. A reset does not raise the limits: a cordon that would
still pass them trips the breaker again. The cordons the breaker held are offered again by the
responder once it sees the reset (`respond.cordon_lane`); with the SQL action record, `reset` says
how many are waiting. Both read an existing action record (the responder's); neither creates one.
"""

from __future__ import annotations

import argparse
import getpass
import json
from typing import Any

from xidpipe.commands.cluster_options import record_database, require_record, settings_from_args, store_parent
from xidpipe.commands.exits import EXIT_OK, EXIT_REFUSED


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("breaker", help="show or reset the cordon circuit breaker",
                                                description="The cordon circuit breaker.", parents=[store_parent()])
    bsub = p.add_subparsers(dest="breaker_command", metavar="SUBCOMMAND", required=True)
    status = bsub.add_parser("status", help="print the breaker state as JSON (exit 0 closed, 4 tripped)",
                             description="Print the breaker state and the latest trips as JSON. Exit status 0 "
                             "when closed, 4 when tripped (automatic cordons are refused).", parents=[store_parent()])
    status.set_defaults(func=run_status)
    reset = bsub.add_parser("reset", help="reset a tripped breaker", parents=[store_parent()],
                            description="Close the breaker so automatic cordons resume; recorded with who and why.")
    reset.add_argument("--reason", required=True, help="why automatic cordons may resume")
    reset.add_argument("--by", default=None, help="who resets it (default: $USER, the login name)")
    reset.set_defaults(func=run_reset)


def _store(args: argparse.Namespace) -> Any:
    from respond.cordon.runtime import store_from

    settings, url = settings_from_args(args), record_database(args)
    require_record(settings, url)
    return store_from(settings, url)


def run_status(args: argparse.Namespace) -> int:
    store = _store(args)
    state = store.breaker()
    trips = [r.model_dump(mode="json") for r in store.recent(200) if r.action in ("breaker_trip", "breaker_reset")]
    print(json.dumps({"breaker": state.model_dump(mode="json"), "history": trips[-10:]}, indent=2))
    return EXIT_REFUSED if state.tripped else EXIT_OK


def run_reset(args: argparse.Namespace) -> int:
    from models.cordon_policy import CordonPolicy
    from respond.cordon.action_log import SqlActionStore
    from respond.cordon.executor import CordonExecutor
    from respond.cordon.pending import PendingCordons

    store = _store(args)
    executor = CordonExecutor(CordonPolicy(), store, None)
    was = executor.breaker_status()
    state = executor.reset_breaker(by=args.by or getpass.getuser(), reason=args.reason)
    print(("breaker reset" if was.tripped else "breaker was not tripped; reset recorded")
          + f": {json.dumps(state.model_dump(mode='json'))}")
    if isinstance(store, SqlActionStore):
        held = PendingCordons(store.engine).held()
        if held:
            shown = ", ".join(f"{p.node} ({p.incident_id})" for p in held[:10]) + (" ..." if len(held) > 10 else "")
            print(f"{len(held)} cordon(s) held by the breaker will be offered again by the responder: {shown}")
    return EXIT_OK
