"""`xidpipe incidents list|show|transition` and `xidpipe stats`: questions to the incident history.

The database is `--database-url`, else `$XIDPIPE_DATABASE_URL`, else the SQLite file `make demo`
wrote; a database that does not exist is an error (exit 3), never created. `-o table|wide|json|yaml`
(`--json` is `-o json`) picks the output. Tables fit the terminal (`xidpipe.commands.layout`); ids are
shown short (`9af48e8`, a unique prefix) and every form of one is accepted (`models.incident_ref`);
times are printed in UTC, ISO 8601 with their zone, and as an age (`3d5h`); time flags also take
relative times (`24h`, `7d`, `yesterday`). A query that answers exits 0, whatever it found.
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
from datetime import UTC, datetime
from typing import Any

from models.code_query import FORMS, code_texts, parse_code_query
from models.lifecycle import BY_PEOPLE, STATES
from models.vocabulary import Category, ComponentKind, values
from xidpipe.commands import output
from xidpipe.commands.exits import EXIT_OK, Refused, Unavailable, UsageError
from xidpipe.commands.layout import Column, print_table
from xidpipe.commands.options import add_enum, history_parents, node_name, output_format
from xidpipe.commands.timeflags import format_age, format_duration, format_time, time_arg

CATEGORIES = values(Category)
COMPONENTS = values(ComponentKind)
STATUSES = ("open", "resolved")
IDS = ("the id, its ticket's form (v2-9af48...z), the fingerprint (v2:9af48e81bb6cb563), or a unique prefix of "
       "one (9af48e8, as the tables show it)")


def code_arg(text: str) -> tuple[str, ...]:
    """argparse `type=` for `--xid`: the codes it names, as stored (`models.code_query`)."""
    try:
        return code_texts(parse_code_query(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any) -> None:
    inc: argparse.ArgumentParser = sub.add_parser("incidents", help="list and show incidents from the history",
                                                  description="Query the incident history the worker keeps.",
                                                  parents=history_parents())
    isub = inc.add_subparsers(dest="incidents_command", metavar="COMMAND", required=True)
    _register_list(isub)
    show: argparse.ArgumentParser = isub.add_parser("show", help="one incident: its dossier and timeline",
                                                    description="Show an incident's dossier, its lifecycle, and "
                                                    "the timeline of its fault events, lifecycle steps, cluster "
                                                    "actions, ticket and chat notifications.",
                                                    parents=history_parents())
    show.add_argument("id", help=f"the incident: {IDS}")
    show.set_defaults(func=run_show)
    tr: argparse.ArgumentParser = isub.add_parser(
        "transition", help="move an incident along its lifecycle (repaired, rma, returned, closed)",
        description="Record a lifecycle step taken by a person: repaired, rma (the card was sent back), "
        "returned (it came back) or closed. The step also ends the incident for the stream: the next fault "
        "of its GPU and family opens a new incident linked to it. mitigated and ticketed are recorded by "
        "the responder. A step the lifecycle does not allow is refused (exit 4); an incident that is not "
        "there, or an ambiguous prefix, is exit 2.", parents=history_parents())
    tr.add_argument("id", help=f"the incident: {IDS}")
    tr.add_argument("to", type=output.enum_arg("lifecycle step", BY_PEOPLE), metavar="TO",
                    help=f"the new lifecycle state ({', '.join(BY_PEOPLE)})")
    tr.add_argument("--reason", required=True, help="why (kept with the step)")
    tr.add_argument("--actor", default=None, help="who took the step (default: $USER, the login name)")
    tr.set_defaults(func=run_transition)
    st: argparse.ArgumentParser = sub.add_parser(
        "stats", help="incident and fault-event counts, fault rates per GPU, MTTR and MTBI", parents=history_parents(),
        description="Incidents by category, component, node and GPU model, and the GPUs and nodes with the "
        "most hardware incidents; fault events by code and namespace; GPU incidents per GPU over the span the "
        "history covers (per 30 days only when it covers 30 days or more) and the mean time between one "
        "GPU's incidents (per incident, so one storm of lines counts once); the mean time to resolve (MTTR) and "
        "between (MTBI) hardware incidents per pool, node and GPU card.")
    st.add_argument("--since", type=time_arg, metavar="TIME",
                    help="only what was seen at or after this time (24h, 7d, yesterday, 2026-11-25, ISO 8601)")
    st.add_argument("--top", type=int, default=10, help="how many nodes, namespaces and GPUs to list")
    st.set_defaults(func=run_stats)


def _register_list(isub: Any) -> None:
    ls: argparse.ArgumentParser = isub.add_parser(
        "list", help="incidents, filtered, newest first", parents=history_parents(),
        description="List incidents, newest first, one page at a time. An incident merged into another (a job's "
        "faults found to stay with a GPU) is that one's and is not listed; --all lists it too, --merged alone.")
    ls.add_argument("--node", type=node_name)
    ls.add_argument("--gpu", help="board serial, GPU UUID or PCI address")
    ls.add_argument("--xid", type=code_arg, metavar="CODE", help=f"a fault code the incident has seen: {FORMS}")
    add_enum(ls, "--category", "category", CATEGORIES, "the incident's class")
    add_enum(ls, "--status", "status", STATUSES, "the stream's grouping state")
    add_enum(ls, "--lifecycle", "lifecycle", STATES, "the incident's lifecycle state")
    add_enum(ls, "--component", "component", COMPONENTS,
             "what the incident is about: a GPU, an NVSwitch, a node's driver, a workload, or the fleet")
    ls.add_argument("--since", type=time_arg, metavar="TIME",
                    help="last seen at or after this time (24h, 7d, yesterday, 2026-11-25, ISO 8601)")
    ls.add_argument("--until", type=time_arg, metavar="TIME", help="first seen before this time")
    ls.add_argument("--namespace", help="a pod of this namespace was hit (also by the faults of a merged incident)")
    ls.add_argument("--owner", help="a workload whose name contains this was hit")
    merged = ls.add_mutually_exclusive_group()
    merged.add_argument("--all", "-A", dest="merged", action="store_const", const="include", default="hide",
                        help="also the incidents merged into others, shown as merged")
    merged.add_argument("--merged", dest="merged", action="store_const", const="only",
                        help="only the incidents merged into others")
    add_enum(ls, "--sort", "sort key", ("last_seen", "first_seen", "count"), "newest or largest first",
             default="last_seen")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--offset", type=int, default=0)
    ls.set_defaults(func=run_list)


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


def print_data(data: Any, fmt: str) -> int:
    """`data` as JSON (`-o json`, `--json`) or YAML (`-o yaml`): the same fields either way."""
    if fmt != "yaml":
        return print_json(data)
    import yaml

    plain = json.loads(json.dumps(data, default=str))  # times and other values as the JSON writes them
    sys.stdout.write(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=False))
    return EXIT_OK


LIST_COLUMNS = (
    Column("ID"), Column("NODE"), Column("COMPONENT", free=True, min_width=13), Column("CATEGORY"),
    Column("FAMILY", drop=1), Column("CODES", free=True, min_width=10), Column("COUNT", drop=2),
    Column("LIFECYCLE"), Column("AGE"),
    Column("KIND", wide=True), Column("STATUS", wide=True), Column("LAST SEEN", wide=True),
    Column("FIRST SEEN (UTC)", wide=True), Column("LAST SEEN (UTC)", wide=True), Column("NAMESPACES", wide=True),
    Column("INCIDENT ID", wide=True), Column("REASON", free=True, wide=True),
)


def run_list(args: argparse.Namespace) -> int:
    from history.incident_rows import incident_to_dict
    from history.queries import IncidentFilter, count_incidents, list_incidents, short_ids
    from models.redact import redact

    f = IncidentFilter(node=args.node, gpu=args.gpu, codes=args.xid or (), category=args.category,
                       status=args.status, since=args.since, until=args.until, namespace=args.namespace,
                       owner=args.owner, lifecycle=args.lifecycle, component=args.component, merged=args.merged)
    fmt = output_format(args)
    with history_session(args) as s:
        rows, total = list_incidents(s, f, sort=args.sort, limit=args.limit, offset=args.offset)
        data = [incident_to_dict(i) for i in rows]
        short = short_ids(s, [d["incident_id"] for d in data])
        hidden = count_incidents(s, dataclasses.replace(f, merged="only")) if f.merged == "hide" else 0
    for d in data:  # as the API shows them: reasons and process names redacted
        d["short_id"] = short[d["incident_id"]]
        d["reason"] = redact(d["reason"]) if d.get("reason") else d.get("reason")
        d["processes"] = [redact(str(p)) for p in d.get("processes") or []]
    if fmt in ("json", "yaml"):
        return print_data({"total": total, "offset": args.offset, "incidents": data}, fmt)
    more = f"; {hidden} merged into others not shown (--all shows them)" if hidden else ""
    if not data:
        print(f"No incidents match{more}.")
        return EXIT_OK
    now = datetime.now(UTC)
    print_table(LIST_COLUMNS, [_list_row(d, now) for d in data], wide=fmt == "wide")
    print(f"\n{len(data)} of {total} (offset {args.offset}){more}")
    return EXIT_OK


def _list_row(d: dict[str, Any], now: datetime) -> list[Any]:
    lifecycle = "merged" if d.get("merged_into") else d["lifecycle"]
    return [d["short_id"], d["node"], component_name(d), d["category"], d["family"],
            ", ".join(map(str, d.get("codes") or [])), d["count"], lifecycle, format_age(d["first_seen"], now),
            d.get("component"), _status(d), format_age(d["last_seen"], now), format_time(d["first_seen"]),
            format_time(d["last_seen"]), ", ".join(_namespaces(d)), d["incident_id"], d.get("reason")]


def _status(d: dict[str, Any]) -> str:
    return f"merged into {d['merged_into']}" if d.get("merged_into") else str(d["status"])


def _namespaces(d: dict[str, Any]) -> list[str]:
    return sorted({str(p).split("/", 1)[0] for p in d.get("pods") or [] if "/" in str(p)})


def component_name(d: dict[str, Any]) -> str:
    """What the incident is about: a GPU's serial (its UUID or PCI address when it has none), an
    NVSwitch's PCI address, `driver` (a node's), a workload's name, or how many nodes a fleet incident
    spans (`fleet: N nodes`)."""
    kind = str(d.get("component") or ComponentKind.GPU)
    if kind == ComponentKind.FLEET:
        return f"fleet: {len(d.get('nodes') or [])} nodes"
    if kind == ComponentKind.GPU:
        return str(d.get("serial") or d.get("gpu_uuid") or d.get("pci") or d["gpu"])
    return str(d.get("component_id") or d.get("pci") or d["gpu"])


def run_show(args: argparse.Namespace) -> int:
    from history.activity import actions, incident_activity
    from history.queries import incident_transitions, resolve_incident, short_ids, timeline
    from models.dossier import render_json
    from models.redact import redact
    from respond.dossier_builder import action_items, build_dossier

    fmt = output_format(args)
    with history_session(args) as s:
        row = resolve(resolve_incident, s, args.id)
        dossier = build_dossier(s, row, action_items(actions(s, row.incident_id), row.incident_id))
        events: list[dict[str, Any]] = [  # redacted as the dossier, the API and the pages redact them
            {"at": e.occurred_at.isoformat(), "code": e.code, "pid": e.pid, "pod": e.pod, "sources": e.sources,
             "process": redact(e.process) if e.process else e.process,
             "message": redact(e.message) if e.message else e.message} for e in timeline(s, row.incident_id)]
        transitions = incident_transitions(s, row.incident_id)
        activity = incident_activity(s, row.incident_id)
        lifecycle, status, merged_into, row_id = row.lifecycle, row.status, row.merged_into, row.incident_id
        history = [h.incident_id for h in (*dossier.gpu_history, *dossier.node_history, *dossier.node_incidents)]
        short = short_ids(s, [row.incident_id, *history, *([merged_into] if merged_into else [])])
    if fmt in ("json", "yaml"):
        return print_data({"dossier": render_json(dossier), "short_id": short[row.incident_id],
                           "lifecycle": lifecycle, "status": status, "merged_into": merged_into,
                           "timeline": events, "transitions": transitions, **activity}, fmt)
    if merged_into:
        print(f"Merged into {short[merged_into]} ({merged_into}): its faults are that incident's; "
              f"`xidpipe incidents show {short[merged_into]}` shows it.\n")
    print_dossier(dossier, short)
    output.heading(f"Lifecycle: {lifecycle} (stream status: {status})")
    print(f"{short[row_id]} is {row_id}'s short id")
    if transitions:
        print_table((Column("AT"), Column("FROM"), Column("TO"), Column("BY"), Column("REASON", free=True)),
                    [[format_time(t["at"]), t["from"], t["to"], t["actor"], t["reason"]] for t in transitions])
    if activity["remediation"]:
        output.heading("Remediation")
        print_table((Column("LOOP"), Column("STAGE"), Column("REMEDY"), Column("SINCE"),
                     Column("WHERE IT STANDS", free=True)),
                    [[r["loop_id"], r["stage"] + (" (stuck)" if r["stuck"] else ""), r["remedy"] or "",
                      format_time(r["stage_since"]), r["reason"]] for r in activity["remediation"]])
    output.heading("Timeline")
    print_table((Column("AT"), Column("WHAT", free=True, min_width=30)),
                sorted(_timeline_rows(events, transitions, activity), key=lambda r: r[0]))
    return EXIT_OK


def print_dossier(dossier: Any, short: dict[str, str]) -> None:
    """The dossier as the ticket has it. Piped: its Markdown, nothing cut. On a terminal: drawn, the
    earlier incidents of its history named by their short ids so that its tables fit."""
    from models.dossier import render_markdown
    from xidpipe.commands.layout import terminal_width

    if terminal_width() is None:
        sys.stdout.write(render_markdown(dossier).rstrip("\n") + "\n")
        return

    def shortened(items: list[Any]) -> list[Any]:
        return [h.model_copy(update={"incident_id": short.get(h.incident_id, h.incident_id)}) for h in items]

    output.markdown(render_markdown(dossier.model_copy(update={
        "gpu_history": shortened(dossier.gpu_history), "node_history": shortened(dossier.node_history),
        "node_incidents": shortened(dossier.node_incidents)})))


def _timeline_rows(events: list[dict[str, Any]], transitions: list[dict[str, Any]],
                   activity: dict[str, Any]) -> list[list[str]]:
    lines: list[tuple[Any, str]] = []
    for e in events:
        lines.append((e["at"], " ".join(str(x) for x in (e["code"], f"({e['sources']})", f"pid {e['pid'] or '?'}",
                                                          e["process"], e["pod"]) if x)))
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
    from history.queries import TransitionError, resolve_incident, short_ids, transition_incident

    actor = args.actor or getpass.getuser()
    fmt = output_format(args)
    with history_session(args) as s:
        row = resolve(resolve_incident, s, args.id)
        try:
            step = transition_incident(s, row.incident_id, args.to, actor=actor, reason=args.reason)
        except TransitionError as exc:
            raise Refused(str(exc)) from None
        s.commit()
        short = short_ids(s, [row.incident_id])[row.incident_id]
    if fmt in ("json", "yaml"):
        return print_data(step, fmt)
    print(f"{short} ({step['incident_id']}): {step['from']} → {step['to']} at {format_time(step['at'])} by "
          f"{step['actor']}: {step['reason']}")
    return EXIT_OK


def run_stats(args: argparse.Namespace) -> int:
    from history.queries import stats

    fmt = output_format(args)
    with history_session(args) as s:
        data = stats(s, args.since, args.top)
    if fmt in ("json", "yaml"):
        return print_data(data, fmt)
    print_stats(data)
    return EXIT_OK


def print_stats(data: dict[str, Any]) -> None:
    from rich.text import Text

    from models.fault_rates import describe_days

    since = f" since {format_time(data['since'])}" if data["since"] else ""
    inc, ev, rates = data["incidents"], data["fault_events"], data["gpu_rates"]
    output.heading(f"Incidents{since}: {inc['total']} (a storm of lines is one incident)")
    for key, title in (("by_category", "CATEGORY"), ("by_component", "COMPONENT"), ("by_node", "NODE"),
                       ("by_gpu_model", "GPU MODEL"), ("hardware_by_gpu", "GPU (hardware incidents)"),
                       ("hardware_by_node", "NODE (hardware incidents)")):
        if inc[key]:
            print_table((Column(title), Column("INCIDENTS")), inc[key].items())
    output.heading(f"Fault events{since}: {ev['total']} (every report of every sensor)")
    for key, title in (("by_code", "CODE"), ("by_namespace", "NAMESPACE")):
        if ev[key]:
            print_table((Column(title), Column("EVENTS")), ev[key].items())
    _print_reliability(data["reliability"], since)
    span = rates["span"]
    if span is None:
        output.heading("GPU fault rates: none, the history holds nothing yet")
        return
    output.heading(f"GPU fault rates over {describe_days(span['days'])}, {format_time(span['from'])} to "
                   f"{format_time(span['to'])} (the span of the history): {rates['incidents']} GPU incidents on "
                   f"{rates['gpus']} GPUs (GPUs from the {rates['gpus_from']})")
    if rates["note"]:
        output.emit(Text(f"({rates['note']})"), prose=True)
    output.emit(Text("PER GPU: GPU incidents per GPU in the span; PER GPU/30D: per 30 days (a span of 30 days or "
                     "more); MEAN GAP: the mean time between one GPU's incidents"), prose=True)
    rows = [["all", *_rate_cells(rates)], *([m, *_rate_cells(r)] for m, r in rates["by_model"].items())]
    print_table((Column("GPU MODEL", free=True, min_width=20), Column("GPUS"), Column("INCIDENTS"),
                 Column("PER GPU"), Column("PER GPU/30D"), Column("MEAN GAP")), rows)


def _print_reliability(rel: dict[str, Any], since: str) -> None:
    from rich.text import Text

    output.heading(f"Reliability{since}: {rel['all']['incidents']} hardware incidents (a GPU's, an NVSwitch's or "
                   f"a node's), {rel['all']['resolved']} resolved")
    output.emit(Text("MTTR: the mean time from an incident's first fault to its resolution; MTBI: the mean time "
                     "between consecutive incidents; a node's pool as xidpipe last recorded it ('' not known)"),
                prose=True)
    for key, title in (("by_pool", "POOL"), ("by_node", "NODE"), ("by_card", "GPU CARD")):
        rows = [[name or "''", f["incidents"], f["resolved"], _duration(f["mean_time_to_resolve_s"]),
                 _duration(f["mean_time_between_incidents_s"])] for name, f in rel[key].items()]
        if rows:
            print_table((Column(title, free=True, min_width=12), Column("INCIDENTS"), Column("RESOLVED"),
                         Column("MTTR"), Column("MTBI")), rows)


def _duration(seconds: float | None) -> str:
    return "n/a" if seconds is None else format_duration(seconds)


def _rate_cells(r: dict[str, Any]) -> list[Any]:
    gap = r["mean_time_between_incidents_s"]
    return [r["gpus"], r["incidents"], _num(r["incidents_per_gpu"]), _num(r["incidents_per_gpu_per_30d"]),
            "n/a" if gap is None else format_duration(gap)]


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"
