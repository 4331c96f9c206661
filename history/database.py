"""Where the incident history is and whether this xidpipe can read it: one answer for the CLI
(`xidpipe incidents|gpus|stats|db`) and the server (`xidpipe serve`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports this module at start: SQLAlchemy is loaded only when used
    import sqlalchemy as sa

DEFAULT_DB = "sqlite:///var/xidpipe.db"  # what `make demo` writes
DATABASE_ENV = "XIDPIPE_DATABASE_URL"


class HistoryUnavailable(RuntimeError):
    """The database is missing, is not the worker's, or is at an older schema; the message says
    which and what to do."""


def database_url(explicit: str | None) -> str:
    """`explicit`, else $XIDPIPE_DATABASE_URL, else the demo's SQLite file."""
    return explicit or os.environ.get(DATABASE_ENV) or DEFAULT_DB


def shown(url: str | sa.URL) -> str:
    """The URL as it may be printed: without its password."""
    import sqlalchemy as sa

    return sa.make_url(url).render_as_string(hide_password=True)


def open_history(url: str) -> sa.Engine:
    """An engine on the worker's database at the current schema, or `HistoryUnavailable`."""
    import sqlalchemy as sa

    from history.engine import make_engine
    from history.migrate import current_revision, head_revision

    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = url.removeprefix("sqlite:///")
        if not os.path.exists(path):  # make_engine would create an empty one
            raise HistoryUnavailable(f"no incident history at {path}: run `make demo` or the worker first, "
                                     "or give --database-url")
    engine = make_engine(url)
    try:
        if not sa.inspect(engine).has_table("incidents"):
            raise HistoryUnavailable(f"{shown(url)} has no incidents table: is it the worker's database?")
        current, head = current_revision(engine), head_revision()
        if current != head:
            raise HistoryUnavailable(f"{shown(url)} is at schema revision {current or 'none'}, this xidpipe needs "
                                     f"{head}: run `xidpipe db upgrade` first")
    except BaseException:
        engine.dispose()
        raise
    return engine
