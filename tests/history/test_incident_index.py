"""`incident_codes` and `incident_namespaces`: one row per distinct pair, however often a batch or a
redelivery offers it, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.incident_index import IncidentIndex
from history.migrate import upgrade


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sa.Engine]:
    url = (f"sqlite:///{tmp_path / 'i.db'}" if request.param == "sqlite"
           else request.getfixturevalue("postgres_database"))
    e = make_engine(url)
    upgrade(e)
    yield e
    e.dispose()


def rows(engine: sa.Engine) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with engine.connect() as conn:
        codes = conn.execute(sa.text("SELECT incident_id, code, xid FROM incident_codes ORDER BY 1, 2")).all()
        namespaces = conn.execute(sa.text("SELECT incident_id, namespace FROM incident_namespaces ORDER BY 1, 2")).all()
    return [tuple(r) for r in codes], [tuple(r) for r in namespaces]


def test_pairs_are_written_once(engine: sa.Engine) -> None:
    index = IncidentIndex()
    for _ in range(3):  # a storm: the same code and namespace again and again
        index.add("i1", "Xid 74", 74, "team-llm")
    index.add("i1", "Xid 13", 13, None)
    index.add("i2", "SXid 12028", None, "team-cv")
    with Session(engine) as s, s.begin():
        index.write(s)
    assert not index.codes and not index.namespaces
    expected = ([("i1", "Xid 13", 13), ("i1", "Xid 74", 74), ("i2", "SXid 12028", None)],
                [("i1", "team-llm"), ("i2", "team-cv")])
    assert rows(engine) == expected
    again = IncidentIndex()  # a redelivered batch, and one new pair
    again.add("i1", "Xid 74", 74, "team-llm")
    again.add("i2", "Xid 79", 79, "team-cv")
    with Session(engine) as s, s.begin():
        again.write(s)
    assert rows(engine) == ([*expected[0][:2], ("i2", "SXid 12028", None), ("i2", "Xid 79", 79)], expected[1])
