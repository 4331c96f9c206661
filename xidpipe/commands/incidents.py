"""`xidpipe incidents list|show|transition` and `xidpipe stats`: questions to the incident history.

The database is `--database-url`, else `$XIDPIPE_DATABASE_URL`, else the SQLite file `make demo`
wrote. `--json` prints JSON instead of a table on every command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from history.database import DEFAULT_DB
from models.identity import COMPONENTS
from models.lifecycle import BY_PEOPLE, STATES


def add_database_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--database-url", default=None,
                   help=f"SQLAlchemy URL (default: $XIDPIPE_DATABASE_URL, else {DEFAULT_DB}, what `make demo` wrote)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _when(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def register(sub: Any) -> None:
    inc: argparse.ArgumentParser = sub.add_parser("incidents", help="list and show incidents from the history",
                                                  description="Query the incident history the worker keeps.")
    isub = inc.add_subparsers(dest="incidents_command", metavar="COMMAND", required=True)
    ls: argparse.ArgumentParser = isub.add_parser("list", help="incidents, filtered, newest first",
                                                  description="List incidents, newest first, one page at a time.")
    ls.add_argument("--node")
    ls.add_argument("--gpu", help="board serial, GPU UUID or PCI address")
    ls.add_argument("--xid", type=int)
    ls.add_argument("--category", help="application, suspected_hardware, hardware, driver, interconnect, ...")
    ls.add_argument("--status", help="open or resolved (the stream's grouping state)")
    ls.add_argument("--lifecycle", choices=STATES, help="the incident's lifecycle state")
    ls.add_argument("--component", choices=COMPONENTS,
                    help="what the incident is about: a GPU, an NVSwitch, a node's driver, a workload, or the fleet "
                    "(one fault family on many nodes, a tripped cordon breaker)")
    ls.add_argument("--since", type=_when, help="last seen at or after this ISO 8601 time")
    ls.add_argument("--until", type=_when, help="first seen before this ISO 8601 time")
    ls.add_argument("--namespace", help="a pod of this namespace was hit")
    ls.add_argument("--owner", help="a workload whose name contains this was hit")
    ls.add_argument("--sort", choices=("last_seen", "first_seen", "count"), default="last_seen")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--offset", type=int, default=0)
    add_database_options(ls)
    ls.set_defaults(func=run_list)
    show: argparse.ArgumentParser = isub.add_parser("show", help="one incident: its dossier and timeline",
                                                    description="Show an incident's dossier (Markdown), its "
                                                    "lifecycle, and the timeline of its fault events, lifecycle "
                                                    "steps, cluster actions, ticket and chat notifications.")
    show.add_argument("id", help="incident id, or a unique prefix of it or of its fingerprint")
    add_database_options(show)
    show.set_defaults(func=run_show)
    tr: argparse.ArgumentParser = isub.add_parser(
        "transition", help="move an incident along its lifecycle (repaired, rma, returned, closed)",
        description="Record a lifecycle step taken by a person: repaired, rma (the card was sent back), "
        "returned (it came back) or closed. The step also ends the incident for the stream: the next fault "
        "of its GPU and family opens a new incident linked to it. mitigated and ticketed are recorded by "
        "the responder.")
    tr.add_argument("id", help="incident id, or a unique prefix of it or of its fingerprint")
    tr.add_argument("to", choices=BY_PEOPLE, help="the new lifecycle state")
    tr.add_argument("--reason", required=True, help="why (kept with the step)")
    tr.add_argument("--actor", default=None, help="who took the step (default: $USER)")
    add_database_options(tr)
    tr.set_defaults(func=run_transition)
    st: argparse.ArgumentParser = sub.add_parser("stats", help="counts over the incident history",
                                                 description="Counts by code, category, node and namespace; the "
                                                 "GPUs and nodes with the most hardware incidents; mean time "
                                                 "between faults.")
    st.add_argument("--since", type=_when, help="only what was seen at or after this ISO 8601 time")
    st.add_argument("--top", type=int, default=10, help="how many nodes, namespaces and GPUs to list")
    add_database_options(st)
    st.set_defaults(func=run_stats)


def history_session(args: argparse.Namespace) -> Any:
    from sqlalchemy.orm import Session

    from history.database import HistoryUnavailable, database_url, open_history

    try:
        return Session(open_history(database_url(args.database_url)))
    except HistoryUnavailable as exc:
        raise SystemExit(f"xidpipe: {exc}") from None


def _row(i: Any) -> dict[str, Any]:
    from history.incident_rows import incident_to_dict

    return incident_to_dict(i)


def run_list(args: argparse.Namespace) -> int:
    from history.queries import IncidentFilter, list_incidents

    f = IncidentFilter(node=args.node, gpu=args.gpu, xid=args.xid, category=args.category, status=args.status,
                       since=args.since, until=args.until, namespace=args.namespace, owner=args.owner,
                       lifecycle=args.lifecycle, component=args.component)
    with history_session(args) as s:
        rows, total = list_incidents(s, f, sort=args.sort, limit=args.limit, offset=args.offset)
        data = [_row(i) for i in rows]
    if args.json:
        json.dump({"total": total, "offset": args.offset, "incidents": data}, sys.stdout, indent=2, default=str)
        print()
        return 0
    if not data:
        print("No incidents match.")
        return 0
    header = ["LAST SEEN", "NODE", "GPU", "FAMILY", "CATEGORY", "COUNT", "STATUS", "LIFECYCLE", "CODES", "ID"]
    table = [[str(d["last_seen"])[:19], d["node"], _what(d), d["family"],
              d["category"], str(d["count"]), d["status"], d["lifecycle"],
              ", ".join(map(str, d.get("codes") or []))[:40], d["incident_id"]] for d in data]
    print_table(header, table)
    print(f"\n{len(data)} of {total} (offset {args.offset})")
    return 0


def _what(d: dict[str, Any]) -> str:
    """The GPU column: the card, or for a fleet incident how many nodes it spans."""
    if d.get("component") == "fleet":
        return f"fleet: {len(d.get('nodes') or [])} nodes"
    return str(d.get("serial") or d.get("gpu_uuid") or d["gpu"])


def print_table(header: list[str], table: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[n]) for r in table)) for n, h in enumerate(header)]
    for r in [header, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def run_show(args: argparse.Namespace) -> int:
    from history.activity import actions, incident_activity
    from history.queries import find_incident, incident_transitions, timeline
    from models.dossier import render_json, render_markdown
    from respond.dossier_builder import action_items, build_dossier

    with history_session(args) as s:
        row = find_incident(s, args.id)
        if row is None:
            print(f"xidpipe incidents show: no incident {args.id!r} (or the prefix is not unique)", file=sys.stderr)
            return 1
        dossier = build_dossier(s, row, action_items(actions(s, row.incident_id), row.incident_id))
        events: list[dict[str, Any]] = [
            {"at": e.occurred_at.isoformat(), "code": e.code, "pid": e.pid, "process": e.process, "pod": e.pod,
             "sources": e.sources, "message": e.message} for e in timeline(s, row.incident_id)]
        transitions = incident_transitions(s, row.incident_id)
        activity = incident_activity(s, row.incident_id)
        lifecycle, status = row.lifecycle, row.status
    if args.json:
        json.dump({"dossier": render_json(dossier), "lifecycle": lifecycle, "status": status, "timeline": events,
                   "transitions": transitions, **activity}, sys.stdout, indent=2, default=str)
        print()
        return 0
    print(render_markdown(dossier))
    print(f"## Lifecycle: {lifecycle} (stream status: {status})\n")
    for t in transitions:
        print(f"- {t['at']} {t['from']} → {t['to']} by {t['actor']}: {t['reason']}")
    if transitions:
        print()
    print("## Timeline\n")
    lines: list[tuple[str, str]] = []
    for e in events:
        lines.append((e["at"], f"{e['code']} ({e['sources']}) pid {e['pid'] or '?'} {e['process'] or ''} "
                               f"{e['pod'] or ''}".rstrip()))
    for t in transitions:
        lines.append((t["at"], f"lifecycle {t['from']} → {t['to']} by {t['actor']}: {t['reason']}"))
    for a in activity["actions"]:
        outcome = "dry-run" if a["dry_run"] else a["outcome"]
        lines.append((a["at"] or "", f"{a['action']} {outcome} on {a['node']} ({a['actor']}): {a['reason']}"))
    for k in activity["tickets"]:
        lines.append((k["created_at"] or "", f"ticket {k['key']} created ({k['tracker']})"))
        if k["last_comment_at"]:
            lines.append((k["last_comment_at"], f"ticket {k['key']} commented"))
    for n in activity["notifications"]:
        lines.append((n["sent_at"] or "", f"chat to {n['channel']} via {n['transport']}: {n['messages']} "
                                          "message(s), the latest at this time"))
    for at, text in sorted(lines, key=lambda x: x[0]):
        print(f"- {at} {text}")
    return 0


def run_transition(args: argparse.Namespace) -> int:
    import getpass

    from history.queries import TransitionError, transition_incident

    actor = args.actor or os.environ.get("USER") or getpass.getuser()
    with history_session(args) as s:
        try:
            step = transition_incident(s, args.id, args.to, actor=actor, reason=args.reason)
        except LookupError as exc:
            print(f"xidpipe incidents transition: {exc.args[0]}", file=sys.stderr)
            return 1
        except TransitionError as exc:
            print(f"xidpipe incidents transition: {exc}", file=sys.stderr)
            return 2
        s.commit()
    if args.json:
        json.dump(step, sys.stdout, indent=2)
        print()
        return 0
    print(f"{step['incident_id']}: {step['from']} → {step['to']} at {step['at']} by {step['actor']}: "
          f"{step['reason']}")
    return 0


def run_stats(args: argparse.Namespace) -> int:
    from history.queries import stats

    with history_session(args) as s:
        data = stats(s, args.since, args.top)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
        return 0
    print(f"{data['incidents']} incidents, {data['fault_events']} fault events"
          + (f" since {data['since']}" if data["since"] else ""))
    for key in ("by_category", "by_code", "by_node", "by_gpu_model", "by_namespace", "hardware_incidents_by_gpu",
                "hardware_incidents_by_node"):
        print(f"\n{key.replace('_', ' ')}:")
        for name, n in data[key].items():
            print(f"  {n:6d}  {name}")
    mtbf = data["mean_time_between_faults_s"]
    print(f"\nmean time between faults on one GPU: {mtbf if mtbf is not None else 'n/a'} s")
    for model, seconds in data["mean_time_between_faults_s_by_model"].items():
        print(f"  {seconds:12.1f} s  {model}")
    return 0
