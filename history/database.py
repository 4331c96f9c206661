"""Whether this xidpipe can read the incident history at a database URL: one answer for the CLI
(`xidpipe incidents|gpus|stats|db`) and the server (`xidpipe serve`). Which URL is the settings'
(`database_url`, `XIDPIPE_DATABASE_URL`; the CLI's `xidpipe.commands.cli_settings`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports this module at start: SQLAlchemy is loaded only when used
    import sqlalchemy as sa

DEFAULT_DB = "sqlite:///var/xidpipe.db"  # what `make demo` writes
DATABASE_ENV = "XIDPIPE_DATABASE_URL"  # the setting's name, for messages that say what to set


class HistoryUnavailable(RuntimeError):
    """The database is missing, is not the worker's, or is at an older schema; the message says
    which and what to do."""


def shown(url: str | sa.URL) -> str:
    """The URL as it may be printed: without its password."""
    import sqlalchemy as sa

    return sa.make_url(url).render_as_string(hide_password=True)


def sqlite_path(url: str) -> str | None:
    """The file of a SQLite URL (None for another database or an in-memory one)."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return url.removeprefix("sqlite:///").split("?", 1)[0]
    return None


def require_database(url: str, setting: str = DATABASE_ENV, what: str = "database") -> None:
    """Refuse a SQLite file that does not exist (SQLAlchemy would create it empty: a typo'd path must
    not become a new database that nothing else reads); the message names the setting to fix."""
    path = sqlite_path(url)
    if path is not None and not os.path.exists(path):
        raise HistoryUnavailable(f"no {what} at {path}: give --database-url or set {setting} (run `make demo` "
                                 "or the worker first to create one)")


def open_history(url: str) -> sa.Engine:
    """An engine on the worker's database at the current schema, or `HistoryUnavailable`. Never
    creates a database."""
    import sqlalchemy as sa

    from history.engine import make_engine
    from history.migrate import current_revision, head_revision

    require_database(url, what="incident history")
    try:
        engine = make_engine(url)
    except sa.exc.ArgumentError as exc:
        raise HistoryUnavailable(f"not a database URL: {exc}") from None
    try:
        if not sa.inspect(engine).has_table("incidents"):
            raise HistoryUnavailable(f"{shown(url)} has no incidents table: is it the worker's database?")
        current, head = current_revision(engine), head_revision()
        if current != head:
            raise HistoryUnavailable(f"{shown(url)} is at schema revision {current or 'none'}, this xidpipe needs "
                                     f"{head}: run `xidpipe db upgrade` first")
    except sa.exc.OperationalError as exc:
        engine.dispose()
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else "unreachable"
        raise HistoryUnavailable(f"cannot open {shown(url)}: {reason}") from None
    except BaseException:
        engine.dispose()
        raise
    return engine


def schema_problem(engine: sa.Engine) -> str | None:
    """None when the database answers and is at this xidpipe's schema, else why not (a readiness check)."""
    from history.migrate import current_revision, head_revision

    current, head = current_revision(engine), head_revision()
    if current != head:
        return f"schema at revision {current or 'none'}, this xidpipe needs {head}"
    return None
