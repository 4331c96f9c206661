"""`xidpipe incidents list|show` and `xidpipe stats`: questions to the incident history."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import Any

DEFAULT_DB = "sqlite:///var/xidpipe.db"


def _db(p: argparse.ArgumentParser) -> None:
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
    ls.add_argument("--status", help="open or resolved")
    ls.add_argument("--since", type=_when, help="last seen at or after this ISO 8601 time")
    ls.add_argument("--until", type=_when, help="first seen before this ISO 8601 time")
    ls.add_argument("--namespace", help="a pod of this namespace was hit")
    ls.add_argument("--owner", help="a workload whose name contains this was hit")
    ls.add_argument("--sort", choices=("last_seen", "first_seen", "count"), default="last_seen")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--offset", type=int, default=0)
    _db(ls)
    ls.set_defaults(func=run_list)
    show: argparse.ArgumentParser = isub.add_parser("show", help="one incident: its dossier and timeline",
                                                    description="Show an incident's dossier (Markdown) and the "
                                                    "timeline of its fault events.")
    show.add_argument("id", help="incident id, or a unique prefix of it or of its fingerprint")
    _db(show)
    show.set_defaults(func=run_show)
    st: argparse.ArgumentParser = sub.add_parser("stats", help="counts over the incident history",
                                                 description="Counts by code, category, node and namespace; the "
                                                 "GPUs and nodes with the most hardware incidents; mean time "
                                                 "between faults.")
    st.add_argument("--since", type=_when, help="only what was seen at or after this ISO 8601 time")
    _db(st)
    st.set_defaults(func=run_stats)


def _session(args: argparse.Namespace) -> Any:
    import os

    import sqlalchemy as sa
    from sqlalchemy.orm import Session

    from streams.store import make_engine

    url = args.database_url or os.environ.get("XIDPIPE_DATABASE_URL") or DEFAULT_DB
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = url.removeprefix("sqlite:///")
        if not os.path.exists(path):
            raise SystemExit(f"xidpipe: no incident history at {path}: run `make demo` or the worker first, "
                             "or give --database-url")
    engine = make_engine(url)
    if not sa.inspect(engine).has_table("incidents"):
        raise SystemExit(f"xidpipe: {sa.make_url(url).render_as_string(hide_password=True)} has no incidents "
                         "table: is it the worker's database?")
    return Session(engine)


def _row(i: Any) -> dict[str, Any]:
    from streams.store import incident_to_dict

    return incident_to_dict(i)


def run_list(args: argparse.Namespace) -> int:
    from xidpipe.history.queries import IncidentFilter, list_incidents

    f = IncidentFilter(node=args.node, gpu=args.gpu, xid=args.xid, category=args.category, status=args.status,
                       since=args.since, until=args.until, namespace=args.namespace, owner=args.owner)
    with _session(args) as s:
        rows, total = list_incidents(s, f, sort=args.sort, limit=args.limit, offset=args.offset)
        data = [_row(i) for i in rows]
    if args.json:
        json.dump({"total": total, "offset": args.offset, "incidents": data}, sys.stdout, indent=2, default=str)
        print()
        return 0
    if not data:
        print("No incidents match.")
        return 0
    header = ["LAST SEEN", "NODE", "GPU", "FAMILY", "CATEGORY", "COUNT", "STATUS", "CODES", "ID"]
    table = [[str(d["last_seen"])[:19], d["node"], d.get("serial") or d.get("gpu_uuid") or d["gpu"], d["family"],
              d["category"], str(d["count"]), d["status"], ", ".join(map(str, d.get("codes") or []))[:40],
              d["incident_id"]] for d in data]
    widths = [max(len(h), *(len(r[n]) for r in table)) for n, h in enumerate(header)]
    for r in [header, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    print(f"\n{len(data)} of {total} (offset {args.offset})")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from models.dossier import render_json, render_markdown
    from xidpipe.history.queries import find_incident, timeline
    from xidpipe.respond.dossier_builder import build_dossier

    with _session(args) as s:
        row = find_incident(s, args.id)
        if row is None:
            print(f"xidpipe incidents show: no incident {args.id!r} (or the prefix is not unique)", file=sys.stderr)
            return 1
        dossier = build_dossier(s, row)
        events = [{"at": e.occurred_at.isoformat(), "code": e.code, "pid": e.pid, "process": e.process,
                   "pod": e.pod, "sources": e.sources, "message": e.message} for e in timeline(s, row.incident_id)]
    if args.json:
        json.dump({"dossier": render_json(dossier), "timeline": events}, sys.stdout, indent=2, default=str)
        print()
        return 0
    print(render_markdown(dossier))
    print("## Timeline\n")
    for e in events:
        print(f"- {e['at']} {e['code']} ({e['sources']}) pid {e['pid'] or '?'} {e['process'] or ''} "
              f"{e['pod'] or ''}".rstrip())
    return 0


def run_stats(args: argparse.Namespace) -> int:
    from xidpipe.history.queries import stats

    with _session(args) as s:
        data = stats(s, args.since)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
        return 0
    print(f"{data['incidents']} incidents, {data['fault_events']} fault events"
          + (f" since {data['since']}" if data["since"] else ""))
    for key in ("by_category", "by_code", "by_node", "by_namespace", "hardware_incidents_by_gpu",
                "hardware_incidents_by_node"):
        print(f"\n{key.replace('_', ' ')}:")
        for name, n in data[key].items():
            print(f"  {n:6d}  {name}")
    mtbf = data["mean_time_between_faults_s"]
    print(f"\nmean time between faults on one GPU: {mtbf if mtbf is not None else 'n/a'} s")
    return 0
