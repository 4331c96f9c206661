"""`xidpipe silence add|list|expire`: Alertmanager-style silences for chat notifications.

A silence drops the notifications of every incident whose labels match all its matchers
(`node="gpu-node-03"`, `family=~"gpu_.*"`, `namespace!=team-a`) from its start to its end.
Silences live in SQL next to the notification log (`--database-url`, else
`$XIDPIPE_SINKS_DATABASE_URL`, else SQLite `var/xidpipe.db`); the database is migrated to the
newest schema first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from models.notify import Matcher, Silence

DEFAULT_DATABASE_URL = "sqlite:///var/xidpipe.db"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> timedelta:
    """`4h`, `30m`, `2h30m`, `1d`, `90s`, `1w`."""
    spec = text.strip().lower()
    parts = _DURATION.findall(spec)
    if not parts or "".join(n + u for n, u in parts) != spec:
        raise ValueError(f"not a duration: {text!r} (examples: 4h, 30m, 2h30m, 1d)")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"a silence must last longer than 0 s: {text!r}")
    return timedelta(seconds=seconds)


def _time(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "silence", help="add, list and expire notification silences",
        description="Silences suppress chat notifications for incidents whose labels match all the "
        "matchers (labels: node, family, category, namespace, pod, pool, gpu_model, gpu_uuid, gpu_serial, "
        "pci, cluster, incident, codes).")
    p.add_argument("--database-url", default=None,
                   help=f"SQLAlchemy URL (default $XIDPIPE_SINKS_DATABASE_URL or {DEFAULT_DATABASE_URL})")
    cmds = p.add_subparsers(dest="silence_command", metavar="ACTION", required=True)
    add = cmds.add_parser("add", help="add a silence")
    add.add_argument("--matcher", "-m", action="append", required=True, metavar="MATCHER",
                     help='NAME=VALUE, NAME!=VALUE, NAME=~REGEX or NAME!~REGEX; repeat for more (all must match)')
    add.add_argument("--duration", "-d", required=True, help="how long, e.g. 4h, 30m, 2h30m, 1d")
    add.add_argument("--starts-at", default=None, help="ISO-8601 start (default now)")
    add.add_argument("--author", required=True, help="who is silencing")
    add.add_argument("--comment", required=True, help="why (an RMA, maintenance, a ticket)")
    add.set_defaults(func=run_add)
    ls = cmds.add_parser("list", help="list active and pending silences")
    ls.add_argument("--all", action="store_true", help="include expired silences")
    ls.add_argument("--json", action="store_true", help="print JSON lines")
    ls.set_defaults(func=run_list)
    ex = cmds.add_parser("expire", help="end a silence now")
    ex.add_argument("id", help="the silence id (or a unique prefix)")
    ex.set_defaults(func=run_expire)


def _store(args: argparse.Namespace) -> Any:
    from history.engine import make_engine
    from history.migrate import upgrade
    from respond.sinks.sink_store import SinkStore

    url = args.database_url or os.environ.get("XIDPIPE_SINKS_DATABASE_URL") or DEFAULT_DATABASE_URL
    engine = make_engine(url)
    upgrade(engine)
    return SinkStore(engine)


def _dict(s: Silence, now: datetime) -> dict[str, Any]:
    state = "expired" if s.ends_at <= now else "active" if s.starts_at <= now else "pending"
    return {"id": s.id, "matchers": [str(m) for m in s.matchers], "starts_at": s.starts_at.isoformat(),
            "ends_at": s.ends_at.isoformat(), "created_by": s.created_by, "comment": s.comment, "state": state}


def run_add(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    try:
        matchers = [Matcher.parse(m) for m in args.matcher]
        duration = parse_duration(args.duration)
        starts = _time(args.starts_at) if args.starts_at else now
    except ValueError as exc:
        print(f"xidpipe silence: {exc}", file=sys.stderr)
        return 2
    silence = _store(args).add_silence(matchers, starts, starts + duration, args.author, args.comment, now)
    print(silence.id)
    return 0


def run_list(args: argparse.Namespace) -> int:
    now = datetime.now(UTC)
    silences = _store(args).silences(now, include_expired=args.all)
    for s in silences:
        d = _dict(s, now)
        if args.json:
            print(json.dumps(d, sort_keys=True))
        else:
            print(f"{d['id']}  {d['state']:<8} {d['starts_at']} → {d['ends_at']}  {' '.join(d['matchers'])}  "
                  f"by {d['created_by']}: {d['comment']}")
    return 0


def run_expire(args: argparse.Namespace) -> int:
    silence = _store(args).expire_silence(args.id, datetime.now(UTC))
    if silence is None:
        print(f"xidpipe silence: no silence {args.id!r} (or the prefix is not unique)", file=sys.stderr)
        return 1
    print(f"expired {silence.id}")
    return 0
