"""The one engine factory for the incident history's database (SQLite or PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa


def make_engine(url: str) -> sa.Engine:
    """An engine for `url`; for SQLite the parent directory is created and WAL mode is used."""
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database
        if db and db != ":memory:":
            Path(db).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, connect_args={"timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(conn: Any, _record: Any) -> None:
            cur = conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True)
