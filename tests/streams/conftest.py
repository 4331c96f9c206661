"""Fixtures of the stream tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database, on SQLite and on the session's PostgreSQL in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'x.db'}"
    return str(request.getfixturevalue("postgres_database"))
