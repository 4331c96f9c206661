"""`xidpipe incidents list|show|transition` and `xidpipe stats`: questions to the incident history.

The database is `--database-url`, else `$XIDPIPE_DATABASE_URL`, else the SQLite file `make demo`
wrote; a database that does not exist is an error (exit 3), never created. `--json` prints JSON
instead of a table on every command. Times are printed in UTC, ISO 8601; time flags also take
relative times (`24h`, `7d`, `yesterday`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import Any

from models.lifecycle import BY_PEOPLE, STATES
from models.vocabulary import Category, ComponentKind, values
from xidpipe.commands import output
from xidpipe.commands.exits import EXIT_OK, Refused, Unavailable, UsageError
from xidpipe.commands.options import add_enum, history_parents, node_name
from xidpipe.commands.timeflags import format_time, time_arg

CATEGORIES = values(Category)
COMPONENTS = values(ComponentKind)
STATUSES = ("open", "resolved")


def register(sub: Any) -> None:
    inc: argparse.ArgumentParser = sub.add_parser("incidents", help="list and show incidents from the history",
                                                  description="Query the incident history the worker keeps.",
                                                  parents=history_parents())
    isub = inc.add_subparsers(dest="incidents_command", metavar="COMMAND", required=True)
    ls: argparse.ArgumentParser = isub.add_parser("list", help="incidents, filtered, newest first",
                                                  description="List incidents, newest first, one page at a time.",
                                                  parents=history_parents())
    ls.add_argument("--node", type=node_name)
    ls.add_argument("--gpu", help="board serial, GPU UUID or PCI address")
    ls.add_argument("--xid", type=int)
    add_enum(ls, "--category", "category", CATEGORIES, "the incident's class")
    add_enum(ls, "--status", "status", STATUSES, "the stream's grouping state")
    add_enum(ls, "--lifecycle", "lifecycle", STATES, "the incident's lifecycle state")
    add_enum(ls, "--component", "component", COMPONENTS,
             "what the incident is about: a GPU, an NVSwitch, a node's driver, a workload, or the fleet")
    ls.add_argument("--since", type=time_arg, metavar="TIME",
                    help="last seen at or after this time (24h, 7d, yesterday, 2026-11-25, ISO 8601)")
    ls.add_argument("--until", type=time_arg, metavar="TIME", help="first seen before this time")
    ls.add_argument("--namespace", help="a pod of this namespace was hit")
    ls.add_argument("--owner", help="a workload whose name contains this was hit")
    add_enum(ls, "--sort", "sort key", ("last_seen", "first_seen", "count"), "newest or largest first",
             default="last_seen")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--offset", type=int, default=0)
    ls.set_defaults(func=run_list)
    show: argparse.ArgumentParser = isub.add_parser("show", help="one incident: its dossier and timeline",
                                                    description="Show an incident's dossier, its lifecycle, and "
                                                    "the timeline of its fault events, lifecycle steps, cluster "
                                                    "actions, ticket and chat notifications.",
                                                    parents=history_parents())
    show.add_argument("id", help="incident id, or a unique prefix of it or of its fingerprint (v2:55b4)")
    show.set_defaults(func=run_show)
    tr: argparse.ArgumentParser = isub.add_parser(
        "transition", help="move an incident along its lifecycle (repaired, rma, returned, closed)",
        description="Record a lifecycle step taken by a person: repaired, rma (the card was sent back), "
        "returned (it came back) or closed. The step also ends the incident for the stream: the next fault "
        "of its GPU and family opens a new incident linked to it. mitigated and ticketed are recorded by "
        "the responder. A step the lifecycle does not allow is refused (exit 4).", parents=history_parents())
    tr.add_argument("id", help="incident id, or a unique prefix of it or of its fingerprint")
    tr.add_argument("to", type=output.enum_arg("lifecycle step", BY_PEOPLE), metavar="TO",
                    help=f"the new lifecycle state ({', '.join(BY_PEOPLE)})")
    tr.add_argument("--reason", required=True, help="why (kept with the step)")
    tr.add_argument("--actor", default=None, help="who took the step (default: $USER, the login name)")
    tr.set_defaults(func=run_transition)
    st: argparse.ArgumentParser = sub.add_parser(
        "stats", help="incident and fault-event counts, and fault rates per GPU", parents=history_parents(),
        description="Incidents by category, component, node and GPU model, and the GPUs and nodes with the "
        "most hardware incidents; fault events by code and namespace; GPU incidents per GPU per 30 days and "
        "the mean time between one GPU's incidents (per incident, so one storm of lines counts once).")
    st.add_argument("--since", type=time_arg, metavar="TIME",
                    help="only what was seen at or after this time (24h, 7d, yesterday, 2026-11-25, ISO 8601)")
    st.add_argument("--top", type=int, default=10, help="how many nodes, namespaces and GPUs to list")
    st.set_defaults(func=run_stats)


def history_session(args: argparse.Namespace) -> Any:
    from sqlalchemy.orm import Session

    from history.database import HistoryUnavailable, open_history
    from xidpipe.commands.cli_settings import history_database

    try:
        return Session(open_history(history_database(args)))
    except HistoryUnavailable as exc:
        raise Unavailable(str(exc)) from None


def resolve(fn: Any, s: Any, ident: str) -> Any:
    """`fn(s, ident)` (`resolve_incident`, `resolve_card`), its LookupError a usage error naming the candidates."""
    try:
        return fn(s, ident)
    except LookupError as exc:
        raise UsageError(str(exc.args[0])) from None


def print_json(data: Any) -> int:
    json.dump(data, sys.stdout, indent=2, default=str)
    print()
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    from history.incident_rows import incident_to_dict
    from history.queries import IncidentFilter, list_incidents
    from models.redact import redact

    f = IncidentFilter(node=args.node, gpu=args.gpu, xid=args.xid, category=args.category, status=args.status,
                       since=args.since, until=args.until, namespace=args.namespace, owner=args.owner,
                       lifecycle=args.lifecycle, component=args.component)
    with history_session(args) as s:
        rows, total = list_incidents(s, f, sort=args.sort, limit=args.limit, offset=args.offset)
        data = [incident_to_dict(i) for i in rows]
    for d in data:  # as the API shows them: reasons and process names redacted
        d["reason"] = redact(d["reason"]) if d.get("reason") else d.get("reason")
        d["processes"] = [redact(str(p)) for p in d.get("processes") or []]
    if args.json:
        return print_json({"total": total, "offset": args.offset, "incidents": data})
    if not data:
        print("No incidents match.")
        return EXIT_OK
    header = ["LAST SEEN", "NODE", "GPU", "FAMILY", "CATEGORY", "COUNT", "STATUS", "LIFECYCLE", "CODES", "ID"]
    output.table(header, [[format_time(d["last_seen"]), d["node"], _what(d), d["family"], d["category"], d["count"],
                           d["status"], d["lifecycle"], ", ".join(map(str, d.get("codes") or [])),
                           d["incident_id"]] for d in data])
    print(f"\n{len(data)} of {total} (offset {args.offset})")
    return EXIT_OK


def _what(d: dict[str, Any]) -> str:
    """The GPU column: the card, or for a fleet incident how many nodes it spans."""
    if d.get("component") == ComponentKind.FLEET:
        return f"fleet: {len(d.get('nodes') or [])} nodes"
    return str(d.get("serial") or d.get("gpu_uuid") or d["gpu"])


def run_show(args: argparse.Namespace) -> int:
    from history.activity import actions, incident_activity
    from history.queries import incident_transitions, resolve_incident, timeline
    from models.dossier import render_json, render_markdown
    from models.redact import redact
    from respond.dossier_builder import action_items, build_dossier

    with history_session(args) as s:
        row = resolve(resolve_incident, s, args.id)
        dossier = build_dossier(s, row, action_items(actions(s, row.incident_id), row.incident_id))
        events: list[dict[str, Any]] = [  # redacted as the dossier, the API and the pages redact them
            {"at": e.occurred_at.isoformat(), "code": e.code, "pid": e.pid, "pod": e.pod, "sources": e.sources,
             "process": redact(e.process) if e.process else e.process,
             "message": redact(e.message) if e.message else e.message} for e in timeline(s, row.incident_id)]
        transitions = incident_transitions(s, row.incident_id)
        activity = incident_activity(s, row.incident_id)
        lifecycle, status = row.lifecycle, row.status
    if args.json:
        return print_json({"dossier": render_json(dossier), "lifecycle": lifecycle, "status": status,
                           "timeline": events, "transitions": transitions, **activity})
    output.markdown(render_markdown(dossier))
    output.heading(f"Lifecycle: {lifecycle} (stream status: {status})")
    if transitions:
        output.table(["AT", "FROM", "TO", "BY", "REASON"], [[format_time(t["at"]), t["from"], t["to"], t["actor"],
                                                             t["reason"]] for t in transitions])
    if activity["remediation"]:
        output.heading("Remediation")
        output.table(["LOOP", "STAGE", "REMEDY", "SINCE", "WHERE IT STANDS"],
                     [[r["loop_id"], r["stage"] + (" (stuck)" if r["stuck"] else ""), r["remedy"] or "",
                       format_time(r["stage_since"]), r["reason"]] for r in activity["remediation"]])
    output.heading("Timeline")
    output.table(["AT", "WHAT"], sorted(_timeline_rows(events, transitions, activity), key=lambda r: r[0]))
    return EXIT_OK


def _timeline_rows(events: list[dict[str, Any]], transitions: list[dict[str, Any]],
                   activity: dict[str, Any]) -> list[list[str]]:
    lines: list[tuple[Any, str]] = []
    for e in events:
        lines.append((e["at"], f"{e['code']} ({e['sources']}) pid {e['pid'] or '?'} {e['process'] or ''} "
                               f"{e['pod'] or ''}".rstrip()))
    for t in transitions:
        lines.append((t["at"], f"lifecycle {t['from']} → {t['to']} by {t['actor']}: {t['reason']}"))
    for a in activity["actions"]:
        outcome = "dry-run" if a["dry_run"] else a["outcome"]
        lines.append((a["at"], f"{a['action']} {outcome} on {a['node']} ({a['actor']}): {a['reason']}"))
    for loop in activity.get("remediation", []):
        for t in loop["transitions"]:
            step = f"{t['from'] or 'opened'} → {t['to']}"
            lines.append((t["at"], f"remediation {loop['loop_id']}: {step}: {t['reason']}"))
    for k in activity["tickets"]:
        lines.append((k["created_at"], f"ticket {k['key']} created ({k['tracker']})"))
        if k["last_comment_at"]:
            lines.append((k["last_comment_at"], f"ticket {k['key']} commented"))
    for n in activity["notifications"]:
        lines.append((n["sent_at"], f"chat to {n['channel']} via {n['transport']}: {n['messages']} message(s), "
                                    "the latest at this time"))
    return [[format_time(at), text] for at, text in lines]


def run_transition(args: argparse.Namespace) -> int:
    from history.queries import TransitionError, resolve_incident, transition_incident

    actor = args.actor or getpass.getuser()
    with history_session(args) as s:
        row = resolve(resolve_incident, s, args.id)
        try:
            step = transition_incident(s, row.incident_id, args.to, actor=actor, reason=args.reason)
        except TransitionError as exc:
            raise Refused(str(exc)) from None
        s.commit()
    if args.json:
        return print_json(step)
    print(f"{step['incident_id']}: {step['from']} → {step['to']} at {format_time(step['at'])} by {step['actor']}: "
          f"{step['reason']}")
    return EXIT_OK


def run_stats(args: argparse.Namespace) -> int:
    from history.queries import stats

    with history_session(args) as s:
        data = stats(s, args.since, args.top)
    if args.json:
        return print_json(data)
    print_stats(data)
    return EXIT_OK


def print_stats(data: dict[str, Any]) -> None:
    since = f" since {format_time(data['since'])}" if data["since"] else ""
    inc, ev, rates = data["incidents"], data["fault_events"], data["gpu_rates"]
    output.heading(f"Incidents{since}: {inc['total']} (a storm of lines is one incident)")
    for key, title in (("by_category", "CATEGORY"), ("by_component", "COMPONENT"), ("by_node", "NODE"),
                       ("by_gpu_model", "GPU MODEL"), ("hardware_by_gpu", "GPU (hardware incidents)"),
                       ("hardware_by_node", "NODE (hardware incidents)")):
        if inc[key]:
            output.table([title, "INCIDENTS"], inc[key].items())
    output.heading(f"Fault events{since}: {ev['total']} (every report of every sensor)")
    for key, title in (("by_code", "CODE"), ("by_namespace", "NAMESPACE")):
        if ev[key]:
            output.table([title, "EVENTS"], ev[key].items())
    window = f" over {rates['window_days']} days" if rates["window_days"] is not None else ""
    output.heading(f"GPU fault rates{window}: {rates['incidents']} GPU incidents on {rates['gpus']} GPUs "
                   f"(GPUs from the {rates['gpus_from'] or 'history'})")
    rows = [["all", rates["gpus"], rates["incidents"], _num(rates["incidents_per_gpu_per_30d"]),
             _num(rates["mean_time_between_incidents_s"])]]
    rows += [[m, r["gpus"], r["incidents"], _num(r["incidents_per_gpu_per_30d"]),
              _num(r["mean_time_between_incidents_s"])] for m, r in rates["by_model"].items()]
    output.table(["GPU MODEL", "GPUS", "INCIDENTS", "PER GPU PER 30 DAYS", "MEAN TIME BETWEEN INCIDENTS (S)"], rows)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"
