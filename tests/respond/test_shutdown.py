"""The responder's shutdown, against real Kafka and PostgreSQL and the Jira stand-in: it stops
fetching, gives the work in flight `shutdown_grace_s` to finish, hands back the rest (cancelled, its
offsets not committed, so the group redelivers it; its ticket refreshes kept for the next run) and
never raises, also when an effect can no longer be scheduled because its executor closed.

Deterministic: a Jira call is held by the stand-in until the test releases it, so the shutdown
always begins while a ticket refresh is in flight and a ticket request waits behind it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from pydantic import SecretStr
from sqlalchemy.orm import Session

from models.ticket_policy import INCIDENT_LABEL_PREFIX
from models.topics import topology
from respond.cordon.runtime import build_executor
from respond.responder import Responder, build_responder, run_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from streams.settings import WorkerSettings
from streams.store import Store
from streams.worker import prepare
from tests.fakes.jira.server import FakeJira
from tests.polling import poll_async
from tests.respond.test_responder import action, incident

TOKEN = "jira-api-token-Shutdown0001"
GRACE_S = 1.0


@pytest.fixture
def jira() -> Iterator[FakeJira]:
    fake = FakeJira(token=TOKEN).start()
    yield fake
    fake.stop()


@pytest.fixture
def setup(kafka_bootstrap: str, postgres_database: str, jira: FakeJira, tmp_path: Path) -> dict[str, Any]:
    prefix = f"t{uuid.uuid4().hex[:6]}."
    prepare(WorkerSettings(bootstrap_servers=kafka_bootstrap, database_url=postgres_database, topic_prefix=prefix,
                           partitions=1))
    ids = {k: f"inc-{k}-{prefix}" for k in ("a", "b", "c")}
    store = Store(postgres_database)
    with Session(store.engine) as s:
        for k, incident_id in ids.items():
            s.add(incident(incident_id, f"gpu-node-{k}", "gpu_lost", "hardware", ["Xid 79"]))
        s.commit()
    store.dispose()
    settings = RespondSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, database_url=postgres_database,
                               group_id=f"g-{prefix}", shutdown_grace_s=GRACE_S, metrics_port=None)
    sinks = build_sinks(SinkSettings(jira_url=jira.url, jira_user=jira.user, jira_api_token=SecretStr(TOKEN),
                                     jira_timeout_s=60, group_wait_s=0, outbox_dir=tmp_path / "outbox"),
                        postgres_database)
    # No cluster: cordons are dry-run decisions, which ask for a ticket refresh like any cordon attempt.
    responder = build_responder(settings, build_executor(settings.actions, database_url=postgres_database), sinks)
    return {"settings": settings, "responder": responder, "ids": ids, "topic": topology(prefix, 1).actions.name,
            "bootstrap": kafka_bootstrap}


def send(setup: dict[str, Any], *values: bytes) -> None:
    """One produce request (linger), so the responder fetches the messages together."""
    producer = KafkaProducer(bootstrap_servers=setup["bootstrap"], linger_ms=200)
    for value in values:
        producer.send(setup["topic"], key=b"n", value=value)
    producer.flush()
    producer.close()


def committed(setup: dict[str, Any]) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=setup["bootstrap"], group_id=setup["settings"].group_id,
                             enable_auto_commit=False)
    try:
        return consumer.committed(TopicPartition(setup["topic"], 0))
    finally:
        consumer.close()


async def committed_async(setup: dict[str, Any]) -> int | None:
    return await asyncio.to_thread(committed, setup)


def others() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


async def stopped(stop: asyncio.Event, run: asyncio.Task[None]) -> float:
    """Set `stop` and wait for the responder: how long it took (it must return, not raise)."""
    started = time.monotonic()
    stop.set()
    await asyncio.wait_for(run, 60)
    return time.monotonic() - started


def test_a_shutdown_with_a_refresh_in_flight_hands_back_the_rest_within_the_grace(
    setup: dict[str, Any], jira: FakeJira,
) -> None:
    responder: Responder = setup["responder"]
    a, b, c = setup["ids"]["a"], setup["ids"]["b"], setup["ids"]["c"]

    async def scenario() -> None:
        stop = asyncio.Event()
        run = asyncio.create_task(run_responder(setup["settings"], responder, stop))
        send(setup, action("notification", c, "gpu-node-c", "opened"))  # chat goes to the outbox: done at once
        await poll_async("the first batch committed", lambda: committed(setup) == 1, 60)

        hold = jira.inject("*", r"/rest/api/\d/.*", kind="hold", times=1)
        send(setup, action("cordon_candidate", a, "gpu-node-a", "cordon"), action("ticket", b, "gpu-node-b", "create"))
        await poll_async("the ticket refresh in flight at Jira", lambda: hold.used == 1, 60)

        took = await stopped(stop, run)
        assert took < GRACE_S + 3, f"shutdown took {took:.1f} s with a {GRACE_S} s grace"
        assert others() == []  # nothing of the responder left running
        assert await committed_async(setup) == 1  # the held batch handed back to the group
        assert responder.ticket_refresh == [a]  # the refresh that did not run, kept for the next run
        assert not any(i for i in jira.issues.values() if f"{INCIDENT_LABEL_PREFIX}{b}" in i.fields["labels"])

        # The next run (the same process's next term, or another replica) gets the batch again.
        hold.release()
        stop = asyncio.Event()
        run = asyncio.create_task(run_responder(setup["settings"], responder, stop))
        await poll_async("the handed-back batch handled and committed",
                         lambda: committed(setup) == 3 and responder.ticket_refresh == [], 60)
        await stopped(stop, run)

    asyncio.run(scenario())
    labels = [label for issue in jira.issues.values() for label in issue.fields.get("labels", [])
              if label.startswith(INCIDENT_LABEL_PREFIX)]
    assert sorted(labels) == sorted(f"{INCIDENT_LABEL_PREFIX}{i}" for i in (a, b)), labels  # once each


def test_an_effect_that_can_no_longer_be_scheduled_is_handed_back_not_raised(
    setup: dict[str, Any], jira: FakeJira,
) -> None:
    """The shutdown begins with a refresh in flight; the threads that run the responder's blocking calls
    are shut down before the refresh returns (as an interpreter shutdown does), so what follows it cannot
    be scheduled: `RuntimeError: cannot schedule new futures after shutdown`. The responder returns, and
    the batch stays uncommitted."""
    responder: Responder = setup["responder"]
    a, b = setup["ids"]["a"], setup["ids"]["b"]  # b: its ticket request waits behind a's refresh

    async def scenario() -> None:
        threads = ThreadPoolExecutor(thread_name_prefix="responder-test")
        asyncio.get_running_loop().set_default_executor(threads)
        stop = asyncio.Event()
        run = asyncio.create_task(run_responder(setup["settings"], responder, stop))
        hold = jira.inject("*", r"/rest/api/\d/.*", kind="hold", times=1)
        send(setup, action("cordon_candidate", a, "gpu-node-a", "cordon"), action("ticket", b, "gpu-node-b", "create"))
        await poll_async("the ticket refresh in flight at Jira", lambda: hold.used == 1, 60)
        stop.set()
        threads.shutdown(wait=False)
        hold.release()
        took = await stopped(stop, run)
        assert took < GRACE_S + 3
        assert others() == []

    asyncio.run(scenario())
    assert committed(setup) is None  # nothing of the batch committed: the group delivers it again
    assert responder.ticket_refresh == [a]  # the refresh whose end could not be scheduled: kept
