"""Sent outbox rows are deleted after their retention; unsent ones never are."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import OutboxMessage
from streams.outbox import prune_sent, utcnow
from streams.store import Store


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'o.db'}" if request.param == "sqlite" else str(
        request.getfixturevalue("postgres_database"))
    st = Store(url)
    st.create_schema()
    yield st
    st.dispose()


def test_sent_rows_past_their_retention_are_deleted_oldest_first(store: Store) -> None:
    now = utcnow()
    ages = {"sent-2d": 2 * 86400, "sent-9d": 9 * 86400, "sent-8d": 8 * 86400, "sent-1h": 3600}
    with Session(store.engine) as s, s.begin():
        for key, age in ages.items():
            s.add(OutboxMessage(idempotency_key=key, stream="actions", key="n1", payload={},
                                created_at=now - timedelta(seconds=age + 1), sent_at=now - timedelta(seconds=age)))
        s.add(OutboxMessage(idempotency_key="unsent-30d", stream="incidents", key="n1", payload={},
                            created_at=now - timedelta(days=30), sent_at=None))

    def keys() -> set[str]:
        with Session(store.engine) as s:
            return set(s.scalars(sa.select(OutboxMessage.idempotency_key)))

    assert prune_sent(store.engine, keep_s=7 * 86400, limit=1) == 1  # the oldest first
    assert keys() == {"sent-2d", "sent-8d", "sent-1h", "unsent-30d"}
    assert store.prune_sent(7 * 86400) == 1
    assert store.prune_sent(7 * 86400) == 0
    assert keys() == {"sent-2d", "sent-1h", "unsent-30d"}
    assert store.prune_sent(86400) == 1
    assert keys() == {"sent-1h", "unsent-30d"}  # an unsent row stays whatever its age: the sweep resends it
