"""The store decides, once, whether a failed transaction may be run again (`streams.store.StoreRetry`);
the worker is the one layer that retries (`streams.app.StoreRetries`). Real database errors from
PostgreSQL: an unreachable server, a deadlock, a unique key written twice."""

from __future__ import annotations

import socket
import threading

import pytest
import sqlalchemy as sa

from streams.store import Store, StoreRetry, retry_kind
from tests.streams.records import T0, Kmsg, items_of

pytestmark = pytest.mark.postgres


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_database_is_a_transient_retry() -> None:
    store = Store(f"postgresql+psycopg://xidpipe@127.0.0.1:{closed_port()}/xidpipe?connect_timeout=2")
    try:
        with pytest.raises(StoreRetry) as caught:
            store.process(items_of([Kmsg("n1").xid(0, 79, T0)]))
    finally:
        store.dispose()
    assert caught.value.kind == "unavailable" and caught.value.transient
    assert caught.value.error == "OperationalError"


def test_a_deadlock_is_a_lock_conflict_and_a_duplicate_key_a_write_conflict(postgres_database: str) -> None:
    engine = sa.create_engine(postgres_database)
    with engine.begin() as conn:
        conn.execute(sa.text("create table r (id int primary key, v int)"))
        conn.execute(sa.text("insert into r values (1, 0), (2, 0)"))
    with pytest.raises(sa.exc.IntegrityError) as duplicate, engine.begin() as conn:
        conn.execute(sa.text("insert into r values (1, 1)"))
    assert retry_kind(duplicate.value) == "write_conflict"

    both_locked_one = threading.Barrier(2)
    errors: list[BaseException] = []

    def update(first: int, second: int) -> None:
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("update r set v = v + 1 where id = :i"), {"i": first})
                both_locked_one.wait(10)
                conn.execute(sa.text("update r set v = v + 1 where id = :i"), {"i": second})
        except sa.exc.DBAPIError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=update, args=order) for order in ((1, 2), (2, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    engine.dispose()
    assert len(errors) == 1, "PostgreSQL ends one of the two transactions"
    assert retry_kind(errors[0]) == "lock_conflict"
    assert retry_kind(ValueError("not the database's")) is None
