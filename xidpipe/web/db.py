"""The incident history for the server: one engine, sessions on a small thread pool, so SQL never
blocks the event loop (SQLite and psycopg are synchronous)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from history.database import HistoryUnavailable, open_history, require_database

T = TypeVar("T")
SQL_THREADS = 4  # concurrent queries; SQLite serialises writers anyway


class Database:
    def __init__(self, url: str, *, schema_checked: bool = True) -> None:
        """`schema_checked`: refuse (HistoryUnavailable) a database without this xidpipe's schema; False
        (`xidpipe serve`, which waits for the worker to migrate it): only an unusable URL is refused."""
        self.engine = open_history(url) if schema_checked else _engine(url)
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


def _engine(url: str) -> Any:
    import sqlalchemy as sa

    from history.engine import make_engine

    require_database(url, what="incident history")
    try:
        return make_engine(url)
    except sa.exc.ArgumentError as exc:
        raise HistoryUnavailable(f"not a database URL: {exc}") from None

