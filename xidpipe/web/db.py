"""The incident history for the server: one engine, sessions on a small thread pool, so SQL never
blocks the event loop (SQLite and psycopg are synchronous)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from streams.store import make_engine

T = TypeVar("T")
DEFAULT_DB = "sqlite:///var/xidpipe.db"
DATABASE_ENV = "XIDPIPE_DATABASE_URL"
VERSION_TABLE = "xidpipe_streams_version"  # streams/migrations/env.py (importing it runs Alembic)
SQL_THREADS = 4  # concurrent queries; SQLite serialises writers anyway


class HistoryUnavailable(RuntimeError):
    """The database is missing or is not the worker's; the message says which and what to do."""


def database_url(explicit: str | None) -> str:
    return explicit or os.environ.get(DATABASE_ENV) or DEFAULT_DB


class Database:
    def __init__(self, url: str) -> None:
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            path = url.removeprefix("sqlite:///")
            if not os.path.exists(path):
                raise HistoryUnavailable(f"no incident history at {path}: run `make demo` or the worker first, "
                                         "or give --database-url")
        self.engine = make_engine(url)
        if not sa.inspect(self.engine).has_table("incidents"):
            shown = sa.make_url(url).render_as_string(hide_password=True)
            raise HistoryUnavailable(f"{shown} has no incidents table: is it the worker's database?")
        behind = _schema_behind(self.engine)
        if behind:
            raise HistoryUnavailable(behind)
        self._pool = ThreadPoolExecutor(SQL_THREADS, thread_name_prefix="xidpipe-sql")

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._read, fn, args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(session, *args)` in one transaction, committed when it returns."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._write, fn, args)

    def _read(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with Session(self.engine) as s:
            return fn(s, *args)

    def _write(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with Session(self.engine) as s, s.begin():
            return fn(s, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.engine.dispose()


def _schema_behind(engine: sa.Engine) -> str | None:
    """Why the database's schema is older than this code's (the Alembic head), or None."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from streams.migrate import alembic_config

    head = ScriptDirectory.from_config(alembic_config(str(engine.url))).get_current_head()
    with engine.connect() as conn:
        current = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()
    if current == head:
        return None
    shown = engine.url.render_as_string(hide_password=True)
    return (f"{shown} is at schema revision {current or 'none'}, this xidpipe needs {head}: run "
            "`xidpipe db upgrade` first")

