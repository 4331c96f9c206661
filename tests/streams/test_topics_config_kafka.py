"""`ensure_topics` creates the topics with their declared configuration and reconciles it on topics
that exist, on the real broker."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from models.topics import DAY_MS, min_insync_replicas, topology
from streams.topics import ensure_topics, reconcile_configs, topic_configs

pytestmark = pytest.mark.kafka


async def _create(bootstrap: str, name: str, configs: dict[str, str]) -> None:
    """A topic of 2 partitions made as an older release (or an operator) made it, with `configs`."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 2, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def _configs(bootstrap: str, names: list[str]) -> dict[str, dict[str, str | None]]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await topic_configs(admin, names)
    finally:
        await admin.close()


def test_topics_are_created_with_their_declared_configs(kafka_bootstrap: str) -> None:
    topo = topology(f"cfg-{uuid.uuid4().hex[:6]}.", partitions=3)
    created = asyncio.run(ensure_topics(kafka_bootstrap, topo))
    names = [n for t in topo.all for n in t.names]
    assert sorted(created) == sorted(names)
    got = asyncio.run(_configs(kafka_bootstrap, names))
    kernel, evidence, state = got[topo.kernel.name], got[topo.evidence.name], got[topo.state.name]
    assert kernel["cleanup.policy"] == "delete" and kernel["retention.ms"] == str(7 * DAY_MS)
    assert state["cleanup.policy"] == "compact" and state["min.compaction.lag.ms"] == str(7 * DAY_MS)
    assert state["retention.ms"] == "-1" and state["segment.ms"] == str(DAY_MS)
    assert int(evidence["max.message.bytes"] or 0) >= 4 * 1024 * 1024
    assert got[topo.kernel.dead_letter]["retention.ms"] == str(30 * DAY_MS)
    assert kernel["min.insync.replicas"] == str(min_insync_replicas(1))
    for t in topo.all:
        for name, wanted in t.broker_configs(1).items():
            assert {k: got[name][k] for k in wanted} == wanted, name


def test_an_existing_topic_with_another_retention_is_reconciled(kafka_bootstrap: str,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    topo = topology(f"cfg-{uuid.uuid4().hex[:6]}.", partitions=2)

    asyncio.run(_create(kafka_bootstrap, topo.kernel.name, {
        "retention.ms": str(3_600_000), "segment.bytes": str(64 * 1024 * 1024)}))
    with caplog.at_level(logging.WARNING, logger="streams.topics"):
        created = asyncio.run(ensure_topics(kafka_bootstrap, topo))
    assert topo.kernel.name not in created
    deadline = time.monotonic() + 30  # the broker applies a config change shortly after it answers
    while True:
        got = asyncio.run(_configs(kafka_bootstrap, [topo.kernel.name]))[topo.kernel.name]
        if got["retention.ms"] == str(7 * DAY_MS) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got["retention.ms"] == str(7 * DAY_MS)
    assert got["segment.bytes"] == str(64 * 1024 * 1024)  # an incremental change: other configs stay
    assert any(topo.kernel.name in r.getMessage() and "retention.ms" in r.getMessage() for r in caplog.records)

    async def again() -> dict[str, dict[str, str]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            return await reconcile_configs(admin, topo.kernel.broker_configs(1))
        finally:
            await admin.close()

    assert asyncio.run(again()) == {}  # nothing differs any more: nothing is changed


def test_a_state_topic_made_for_deletion_is_turned_compacted_and_keeps_its_records(kafka_bootstrap: str) -> None:
    """A state topic created by an earlier release (delete, 7 days) is reconfigured in place: the records
    already in it (keyed by node) stay readable; compaction applies to them, per node key, past the lag."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topo = topology(f"cfg-{uuid.uuid4().hex[:6]}.", partitions=2)

    asyncio.run(_create(kafka_bootstrap, topo.state.name, {"cleanup.policy": "delete",
                                                           "retention.ms": str(7 * DAY_MS)}))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for i in range(3):
        producer.send(topo.state.name, key=b"node-1", value=f"old-{i}".encode()).get(timeout=30)
    producer.close()
    assert topo.state.name not in asyncio.run(ensure_topics(kafka_bootstrap, topo))
    deadline = time.monotonic() + 30
    while True:
        got = asyncio.run(_configs(kafka_bootstrap, [topo.state.name]))[topo.state.name]
        if got["cleanup.policy"] == "compact" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got["cleanup.policy"] == "compact" and got["min.compaction.lag.ms"] == str(7 * DAY_MS)
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topo.state.name, p) for p in (0, 1)]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 3 and time.monotonic() < deadline:
            values += [r.value for batch in consumer.poll(timeout_ms=200).values() for r in batch]
    finally:
        consumer.close()
    assert values == [b"old-0", b"old-1", b"old-2"]  # younger than the lag: every record stays, in order
