"""`xidpipe db upgrade|current`: the database's schema (Alembic migrations in `history/migrations`).

Every table is made by the migrations: the stream pipeline's, the incident history and GPU
ledger, the sinks' (tickets, chat notifications, silences) and the action record's.

The database is `--database-url`, else `$XIDPIPE_DATABASE_URL`, else the SQLite file `make demo`
writes. `upgrade` creates a database that does not exist yet; `current` never does. The worker,
the responder and the commands that write to an existing one (`silence add|expire`, and `node`
and `breaker` with a database URL) upgrade it when they start; this command does it ahead of a
rollout, creates a new one, or upgrades one the CLI and the API read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from history.database import HistoryUnavailable, require_database, shown
from xidpipe.commands.exits import EXIT_OK, Unavailable, UsageError
from xidpipe.commands.options import database_parent, json_parent


def register(sub: Any) -> None:
    db: argparse.ArgumentParser = sub.add_parser("db", help="apply or show the database schema migrations",
                                                 description="Apply or show the Alembic migrations of every "
                                                 "table: incident history, GPU ledger, sinks and "
                                                 "action record.", parents=_common())
    dsub = db.add_subparsers(dest="db_command", metavar="COMMAND", required=True)
    up: argparse.ArgumentParser = dsub.add_parser("upgrade", help="migrate to the newest schema (or --revision)",
                                                  description="Apply the migrations up to --revision (default "
                                                  "head). An up-to-date database is left as it is.",
                                                  parents=_common())
    up.add_argument("--revision", default="head", help="target revision (default: head)")
    up.set_defaults(func=run_upgrade)
    cur: argparse.ArgumentParser = dsub.add_parser("current", help="the database's revision and the newest one",
                                                   description="Print the database's schema revision and the "
                                                   "newest revision this xidpipe knows.", parents=_common())
    cur.set_defaults(func=run_current)


def _common() -> list[argparse.ArgumentParser]:
    return [database_parent(), json_parent()]


def _url(args: argparse.Namespace) -> str:
    from xidpipe.commands.cli_settings import history_database

    return history_database(args)


def revisions(engine: Any) -> tuple[str | None, str | None]:
    """(the database's revision or None, the newest revision of the migrations)."""
    from history.migrate import current_revision, head_revision

    return current_revision(engine), head_revision()


def _report(args: argparse.Namespace, url: str, current: str | None, head: str | None, before: str | None) -> None:
    if args.json:
        json.dump({"database": shown(url), "revision": current, "head": head, "previous": before}, sys.stdout,
                  indent=2)
        print()
        return
    where = shown(url)
    state = "up to date" if current == head else f"newest is {head}"
    print(f"{where}: revision {current or '(none)'} ({state})")


def run_upgrade(args: argparse.Namespace) -> int:
    from alembic.util.exc import CommandError

    from history.engine import make_engine
    from history.migrate import upgrade

    url = _url(args)
    engine = make_engine(url)
    try:
        before, _ = revisions(engine)
        try:
            upgrade(engine, args.revision)
        except CommandError as exc:
            raise UsageError(str(exc)) from None
        current, head = revisions(engine)
    finally:
        engine.dispose()
    if not args.json and before != current:
        print(f"migrated from {before or '(empty)'} to {current}")
    _report(args, url, current, head, before)
    return EXIT_OK


def run_current(args: argparse.Namespace) -> int:
    from history.engine import make_engine

    url = _url(args)
    try:
        require_database(url)
    except HistoryUnavailable as exc:
        raise Unavailable(str(exc)) from None
    engine = make_engine(url)
    try:
        current, head = revisions(engine)
    finally:
        engine.dispose()
    _report(args, url, current, head, None)
    return EXIT_OK
