"""`xidpipe remediation list|show|pause|resume|cancel`: the remediation loops after the cordon.

`list` and `show` read the loops from the database; `pause`, `resume` and `cancel` record the
operator's request on the loop, which the leader responder acts on at its next pass (a paused loop
takes no further step; a cancelled one deletes its running Jobs and ends; the node keeps xidpipe's
cordon until someone releases it with `xidpipe node release`). Exit status: 0 done, 2 no such loop
(or a prefix that is not unique), 4 refused (the loop has ended).
"""

from __future__ import annotations

import argparse
import getpass
from typing import Any

from xidpipe.commands import output
from xidpipe.commands.exits import EXIT_OK, Refused, UsageError
from xidpipe.commands.incidents import history_session, print_json
from xidpipe.commands.options import history_parents, node_name
from xidpipe.commands.timeflags import format_time


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "remediation", help="the remediation loops after the cordon: list, show, pause, resume, cancel",
        description="The remediation loops: what xidpipe does after a cordon (drain, reset or reboot, "
        "validate, return or RMA), and the operator's pause, resume and cancel.", parents=history_parents())
    rsub = p.add_subparsers(dest="remediation_command", metavar="COMMAND", required=True)
    ls: argparse.ArgumentParser = rsub.add_parser("list", help="loops, newest first", parents=history_parents(),
                                                  description="List the remediation loops, newest first.")
    which = ls.add_mutually_exclusive_group()
    which.add_argument("--active", action="store_true", help="only loops not finished")
    which.add_argument("--stuck", action="store_true", help="only loops not finished past their deadline")
    ls.add_argument("--node", type=node_name)
    ls.add_argument("--incident")
    ls.add_argument("--limit", type=int, default=50)
    ls.set_defaults(func=run_list)
    show: argparse.ArgumentParser = rsub.add_parser(
        "show", help="one loop: stage, attempts, transitions", parents=history_parents(),
        description="Show one loop: where it stands, its Jobs and hand-offs, its transitions with their reasons.")
    show.add_argument("loop", metavar="LOOP|INCIDENT|NODE", help="a loop id or a unique prefix of one, or an "
                      "incident id or a node name (its latest loop)")
    show.set_defaults(func=run_show)
    for name, what in (("pause", "take no further step until resumed"), ("resume", "go on from where it stands"),
                       ("cancel", "stop: its running Jobs are deleted, the node stays cordoned")):
        c: argparse.ArgumentParser = rsub.add_parser(name, help=what, parents=history_parents(),
                                                     description=f"Ask the responder to {what}.")
        c.add_argument("loop", metavar="LOOP|INCIDENT|NODE")
        c.add_argument("--by", default=None, help="who asks (default: $USER, the login name)")
        if name == "cancel":
            c.add_argument("--reason", required=True, help="why the loop stops")
        c.set_defaults(func=run_request, request=name)


def _store(s: Any) -> Any:
    from history.remediation_store import RemediationStore

    return RemediationStore(s.get_bind())


def _found(store: Any, ident: str) -> Any:
    loop = store.find(ident)
    if loop is None:
        raise UsageError(f"no remediation loop {ident!r} (or the prefix is not unique); `xidpipe remediation list`")
    return loop


def run_list(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from history.remediation_store import loop_dict

    with history_session(args) as s:
        store = _store(s)
        loops = store.loops(active=True if args.active or args.stuck else None, node=args.node,
                            incident_id=args.incident, limit=args.limit)
    rows = [loop_dict(lp, now=datetime.now(UTC)) for lp in loops]
    if args.stuck:
        rows = [r for r in rows if r["stuck"]]
    if args.json:
        return print_json({"loops": rows})
    if not rows:
        print("No remediation loops match.")
        return EXIT_OK
    output.table(["LOOP", "NODE", "INCIDENT", "STAGE", "REMEDY", "SINCE", "WHERE IT STANDS"],
                 [[r["loop_id"], r["node"], r["incident_id"], _stage(r), r["remedy"] or "",
                   format_time(r["stage_since"]), r["reason"]] for r in rows])
    return EXIT_OK


def _stage(r: dict[str, Any]) -> str:
    flags = [f for f, on in (("dry run", r["dry_run"] and r["stage"] != "dry_run"), ("paused", r["paused"]),
                             ("stuck", r["stuck"]), ("cancel asked", r["cancel_requested"] and not r["final"])) if on]
    return str(r["stage"]) + (f" ({', '.join(flags)})" if flags else "")


def run_show(args: argparse.Namespace) -> int:
    from history.remediation_store import describe

    with history_session(args) as s:
        store = _store(s)
        shown = describe(store, _found(store, args.loop))
    if args.json:
        return print_json(shown)
    output.heading(f"Remediation {shown['loop_id']}: {_stage(shown)}")
    output.table(["", ""], [["node", shown["node"]], ["incident", shown["incident_id"]], ["GPU", shown["gpu"]],
                            ["card", shown["card"] or "?"], ["remedy", shown["remedy"] or ""],
                            ["opened", format_time(shown["opened_at"])],
                            ["deadline", format_time(shown["deadline_at"])],
                            ["where it stands", shown["reason"]]])
    if shown["attempts"]:
        output.heading("Jobs and hand-offs")
        output.table(["KIND", "#", "VIA", "JOB", "OUTCOME", "VALIDATED", "RESERVED", "REASON"],
                     [[a["kind"], a["seq"], a["via"], a["job"], a["outcome"], a["validated"] or "",
                       format_time(a["reserved_at"]), a["reason"]] for a in shown["attempts"]])
    output.heading("Transitions")
    output.table(["AT", "FROM", "TO", "REASON"], [[format_time(t["at"]), t["from"] or "", t["to"], t["reason"]]
                                                  for t in shown["transitions"]])
    return EXIT_OK


def run_request(args: argparse.Namespace) -> int:
    by = args.by or getpass.getuser()
    with history_session(args) as s:
        store = _store(s)
        loop = _found(store, args.loop)
        if loop.final:
            raise Refused(f"refused: remediation loop {loop.loop_id} has ended ({loop.stage}: {loop.reason})")
        if args.request == "cancel":
            changed = store.request(loop.loop_id, by=by, cancel=args.reason)
        else:
            changed = store.request(loop.loop_id, by=by, paused=args.request == "pause")
    if args.json:
        return print_json({"loop_id": changed.loop_id, "stage": changed.stage, "paused": changed.paused,
                           "cancel_requested": changed.cancel_requested})
    what = {"pause": "paused", "resume": "resumed", "cancel": "cancel requested"}[args.request]
    print(f"remediation loop {changed.loop_id} ({changed.stage}) {what} by {by}; the responder acts at its next pass")
    return EXIT_OK
