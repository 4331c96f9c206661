"""The worker's Faust app (`streams.app`) apart from Kafka: how it is configured and wired, the one
retry policy of store calls, and dead letters published until Kafka takes them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kafka.errors import KafkaTimeoutError

from models.dead_letter import DeadLetter
from models.topics import topology
from streams.app import PermanentError, Pipeline, StoreRetries, create_app, send_until_taken
from streams.faust_transport import FetchWaitTransport
from streams.settings import WorkerSettings
from streams.store import StoreRetry


def settings(tmp_path: Path, **over: Any) -> WorkerSettings:
    return WorkerSettings(database_url=f"sqlite:///{tmp_path / 'w.db'}", datadir=tmp_path / "faust",
                          store_process=False, **over)


def test_the_app_leaves_waiting_for_handed_events_to_the_pipeline_and_fetches_with_its_wait(tmp_path: Path) -> None:
    st = settings(tmp_path, fetch_max_wait_ms=250, app_id="t-app")
    app = create_app(st)
    assert app.conf.stream_wait_empty is False  # `Pipeline._settle` waits, without the held lines
    assert app.conf.processing_guarantee.value == "at_least_once"
    assert isinstance(app.transport, FetchWaitTransport) and app.transport.fetch_max_wait_ms == 250
    assert set(app.agents) == {"t-app.pipeline"}
    topo = topology(st.topic_prefix, st.partitions)
    [agent] = app.agents.values()
    assert set(agent.channel.topics) == {t.name for t in topo.inputs}


class FlakyTopic:
    """A Faust topic's `send` (it returns the future of the broker's acknowledgement) that times out at first."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent: list[tuple[bytes | None, bytes]] = []

    async def send(self, *, key: bytes | None, value: bytes, headers: Any, force: bool) -> asyncio.Future[None]:
        if self.failures:
            self.failures -= 1
            raise KafkaTimeoutError("no broker")
        self.sent.append((key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def test_a_dead_letter_publish_that_fails_is_retried_until_kafka_takes_it_and_counted_once(tmp_path: Path) -> None:
    st = settings(tmp_path, app_id="t-dlq")
    pipeline = Pipeline(create_app(st), st, topology(st.topic_prefix, st.partitions))
    topic = topology(st.topic_prefix, st.partitions).kernel.name
    flaky = pipeline.dead_letters[topic] = FlakyTopic(failures=2)
    dl = DeadLetter("bad_field", "pid out of range", topic, 0, 5, b"n1", b"{}", datetime.now(UTC))
    asyncio.run(asyncio.wait_for(pipeline.dead_letter(dl), 10))
    assert [(k, DeadLetter.from_json(v)) for k, v in flaky.sent] == [(b"n1", dl)]
    assert pipeline.observe.metrics.dead_letters.labels(topic, "bad_field")._value.get() == 1


def test_send_until_taken_waits_longer_after_each_failure() -> None:
    flaky = FlakyTopic(failures=2)
    dl = DeadLetter("empty", "a tombstone", "t", 0, 1, None, None, datetime.now(UTC))
    loop_time: list[float] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await send_until_taken(flaky, dl)
        loop_time.append(loop.time() - started)

    asyncio.run(run())
    assert len(flaky.sent) == 1 and 0.6 <= loop_time[0] < 3  # 0.2 s, then 0.4 s


def test_store_retries_one_policy_by_kind() -> None:
    unavailable = StoreRetry("unavailable", "OperationalError", "connection refused")
    plan = StoreRetries(max_delay_s=1.0)
    assert [plan.after(unavailable) for _ in range(5)] == [(0.2, "unavailable"), (0.4, "unavailable"),
                                                            (0.8, "unavailable"), (1.0, "unavailable"),
                                                            (1.0, "unavailable")]  # until the database is back

    lock = StoreRetry("lock_conflict", "OperationalError", "deadlock detected")
    plan = StoreRetries(max_delay_s=30.0)
    soon = [plan.after(lock) for _ in range(5)]
    assert all(kind is None and 0 <= delay <= 0.1 for delay, kind in soon)  # at once, apart from the other
    assert plan.after(lock) == (0.2, "unavailable")  # then waited for as the database's

    write = StoreRetry("write_conflict", "IntegrityError", "duplicate key value")
    plan = StoreRetries(max_delay_s=30.0)
    assert [kind for _, kind in (plan.after(write) for _ in range(5))] == ["conflict"] * 5
    with pytest.raises(PermanentError, match="IntegrityError: duplicate key value"):
        plan.after(write)  # not a race: the records'


def test_a_store_retry_crosses_the_store_process_boundary_as_it_is() -> None:
    import pickle

    exc = StoreRetry("write_conflict", "IntegrityError", "duplicate key value")
    again = pickle.loads(pickle.dumps(exc))
    assert (again.kind, again.error, again.detail, str(again)) == (exc.kind, exc.error, exc.detail, str(exc))
    assert not again.transient and StoreRetry("lock_conflict", "OperationalError").transient
