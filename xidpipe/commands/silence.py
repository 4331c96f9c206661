"""`xidpipe silence add|list|expire`: Alertmanager-style silences for chat notifications.

A silence drops the notifications of every incident whose labels match all its matchers
(`node="gpu-node-03"`, `family=~"gpu_.*"`, `namespace!=team-a`) from its start to its end. The
labels are a closed set (`LABELS`); a matcher on any other name is refused, with the near miss.
Silences live in SQL next to the notification log: `--database-url`, else `$XIDPIPE_DATABASE_URL`
(or `database_url` in the config file), else SQLite `var/xidpipe.db`. The
database must exist (the responder's; a typo'd path is an error, never a new file nobody reads);
`add` and `expire` migrate it to the newest schema first.
"""

from __future__ import annotations

import argparse
import getpass
import json
from datetime import UTC, datetime
from typing import Any

from history.database import DATABASE_ENV, DEFAULT_DB, HistoryUnavailable, require_database
from models.notify import Matcher, Silence
from xidpipe.commands import output
from xidpipe.commands.exits import EXIT_OK, Unavailable, UsageError
from xidpipe.commands.options import database_parent, json_parent
from xidpipe.commands.timeflags import format_time, parse_duration, time_arg

__all__ = ["LABELS", "parse_duration", "register"]

# The labels of an incident's notification (respond.sinks.model.IncidentNotice.alert_labels, and
# `component` on fleet incidents): what a matcher can name.
LABELS = ("node", "family", "category", "severity", "component", "namespace", "pod", "pool", "gpu_model", "gpu_uuid",
          "gpu_serial", "pci", "cluster", "incident", "fingerprint", "codes")


def register(sub: Any) -> None:
    db = database_parent(f"${DATABASE_ENV}, else {DEFAULT_DB}")
    p: argparse.ArgumentParser = sub.add_parser(
        "silence", help="add, list and expire notification silences", parents=[db],
        description="Silences suppress chat notifications for incidents whose labels match all the "
        f"matchers (labels: {', '.join(LABELS)}).")
    cmds = p.add_subparsers(dest="silence_command", metavar="ACTION", required=True)
    add = cmds.add_parser("add", help="add a silence", parents=[db, json_parent()])
    add.add_argument("--matcher", "-m", action="append", required=True, metavar="MATCHER",
                     help='NAME=VALUE, NAME!=VALUE, NAME=~REGEX or NAME!~REGEX; repeat for more (all must match)')
    add.add_argument("--duration", "-d", required=True, help="how long, e.g. 4h, 30m, 2h30m, 1d")
    add.add_argument("--starts-at", type=time_arg, default=None, metavar="TIME",
                     help="start (default now; ISO 8601, a date, or 2h for two hours ago)")
    add.add_argument("--author", default=None, help="who is silencing (default: $USER, the login name)")
    add.add_argument("--comment", required=True, help="why (an RMA, maintenance, a ticket)")
    add.set_defaults(func=run_add)
    ls = cmds.add_parser("list", help="list active and pending silences", parents=[db, json_parent()])
    ls.add_argument("--all", action="store_true", help="include expired silences")
    ls.set_defaults(func=run_list)
    ex = cmds.add_parser("expire", help="end a silence now", parents=[db, json_parent()])
    ex.add_argument("id", help="the silence id (or a unique prefix)")
    ex.set_defaults(func=run_expire)


def parse_matcher(text: str) -> Matcher:
    """A matcher on one of `LABELS`; `ValueError` naming the near miss otherwise."""
    m = Matcher.parse(text)
    if m.name not in LABELS:
        raise ValueError(f"unknown label {m.name!r} in {text!r}{output.close_matches(m.name, LABELS)}; "
                         f"labels: {', '.join(LABELS)}")
    return m


def _store(args: argparse.Namespace, *, write: bool) -> Any:
    import sqlalchemy as sa

    from history.engine import make_engine
    from history.migrate import upgrade
    from respond.sinks.sink_store import SinkStore
    from xidpipe.commands.cli_settings import history_database

    url = history_database(args)
    try:
        require_database(url, DATABASE_ENV)
    except HistoryUnavailable as exc:
        raise Unavailable(str(exc)) from None
    engine = make_engine(url)
    if write:
        upgrade(engine)
    elif not sa.inspect(engine).has_table("silences"):
        raise Unavailable("the database has no silences table: run `xidpipe db upgrade` (or the responder) first")
    return SinkStore(engine)


def _dict(s: Silence, now: datetime) -> dict[str, Any]:
    state = "expired" if s.ends_at <= now else "active" if s.starts_at <= now else "pending"
    return {"id": s.id, "matchers": [str(m) for m in s.matchers], "starts_at": s.starts_at.isoformat(),
            "ends_at": s.ends_at.isoformat(), "created_by": s.created_by, "comment": s.comment, "state": state}


def run_add(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    try:
        matchers = [parse_matcher(m) for m in args.matcher]
        duration = parse_duration(args.duration)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    starts = args.starts_at or now
    silence = _store(args, write=True).add_silence(matchers, starts, starts + duration,
                                                   args.author or getpass.getuser(), args.comment, now)
    print(json.dumps(_dict(silence, now), sort_keys=True) if args.json else silence.id)
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    items = [_dict(s, now) for s in _store(args, write=False).silences(now, include_expired=args.all)]
    if args.json:
        for d in items:
            print(json.dumps(d, sort_keys=True))
        return EXIT_OK
    if not items:
        print("No silences." if args.all else "No active or pending silences (--all shows the expired).")
        return EXIT_OK
    output.table(["ID", "STATE", "STARTS", "ENDS", "MATCHERS", "BY", "COMMENT"],
                 [[d["id"], d["state"], format_time(d["starts_at"]), format_time(d["ends_at"]), " ".join(d["matchers"]),
                   d["created_by"], d["comment"]] for d in items])
    return EXIT_OK


def run_expire(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    store = _store(args, write=True)
    hits = [s for s in store.silences(now, include_expired=True) if s.id == args.id] or \
        [s for s in store.silences(now, include_expired=True) if s.id.startswith(args.id)]
    if not hits:
        raise UsageError(f"no silence {args.id!r}")
    if len(hits) > 1:
        shown = ", ".join(f"{s.id} ({' '.join(map(str, s.matchers))})" for s in hits[:10])
        raise UsageError(f"{args.id!r} is ambiguous: it begins {len(hits)} silences: {shown}")
    silence = store.expire_silence(hits[0].id, now)
    print(json.dumps(_dict(silence, now), sort_keys=True) if args.json else f"expired {silence.id}")
    return EXIT_OK
