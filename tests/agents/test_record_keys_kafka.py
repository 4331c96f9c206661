"""Every record of one node lands on the node's partition, on the real broker: the state topic's
records are keyed (node, kind) for compaction, and the agent's partitioner hashes only the node part."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from agents.metrics import Metrics
from agents.publisher import Publisher
from agents.spool import Spool
from models.node_records import (
    GpuInventory,
    GpuProcesses,
    KernelLine,
    NodeRecord,
    PodAssignments,
    SpoolDrops,
    encode_node_record,
)
from models.topics import record_key, topology
from models.wire import topic_for
from streams.topics import ensure_topics

pytestmark = pytest.mark.kafka

PARTITIONS = 12
T0 = datetime(2025, 3, 7, 18, 0, tzinfo=UTC)


def _default_partition(key: str) -> int:
    return (murmur2(key.encode()) & 0x7FFFFFFF) % PARTITIONS


def _node() -> str:
    """A node whose state keys Kafka's default partitioner would spread over other partitions than its
    own, so that a partitioner hashing the whole key fails the test."""
    while True:
        node = f"gpu-{uuid.uuid4().hex[:8]}"
        kinds = ("inventory", "gpu_processes", "pod_assignments", "spool_drops")
        if all(_default_partition(f"{node}/{k}") != _default_partition(node) for k in kinds):
            return node


def _records(node: str) -> list[NodeRecord]:
    return [
        KernelLine(node=node, record_id="k1", source="kmsg", boot_id="b", seq=1, fault=True, event_at=T0,
                   message="NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."),
        GpuInventory(node=node, record_id="i1", driver_version="550.54.15"),
        GpuProcesses(node=node, record_id="p1"),
        PodAssignments(node=node, record_id="a1", changed_at=T0),
        SpoolDrops(node=node, record_id="d1", dropped_total=1, dropped_since_last=1),
    ]


def test_records_of_every_kind_of_a_node_share_the_partition_of_its_kernel_lines(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topo = topology(f"keys-{uuid.uuid4().hex[:6]}.", partitions=PARTITIONS)
    asyncio.run(ensure_topics(kafka_bootstrap, topo))
    node = _node()
    records = _records(node)
    prefix = topo.kernel.name.removesuffix(topic_for(records[0]))
    metrics = Metrics()
    spool = Spool(tmp_path / "spool", metrics)
    for r in records:
        spool.append(f"{prefix}{topic_for(r)}", record_key(r), encode_node_record(r).decode(), fault=True,
                     record_id=r.record_id)
    last = spool.last_number
    publisher = Publisher(spool, metrics, node=node, bootstrap_servers=kafka_bootstrap, on_acked=lambda n: None)
    stop = threading.Event()
    thread = threading.Thread(target=publisher.run, args=(stop,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while spool.acked < last and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    thread.join(timeout=10)
    publisher.close()
    assert spool.acked == last

    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False)
    found: dict[bytes, tuple[str, int]] = {}
    try:
        parts = [TopicPartition(t.name, p) for t in (topo.kernel, topo.state) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 60
        while len(found) < len(records) and time.monotonic() < deadline:
            for tp, batch in consumer.poll(timeout_ms=200).items():
                found.update({r.key: (tp.topic, tp.partition) for r in batch})
    finally:
        consumer.close()

    kinds = ["inventory", "gpu_processes", "pod_assignments", "spool_drops"]
    assert sorted(found) == sorted([node.encode(), *(f"{node}/{k}".encode() for k in kinds)])
    assert found[node.encode()] == (topo.kernel.name, _default_partition(node))
    assert {found[f"{node}/{k}".encode()] for k in kinds} == {(topo.state.name, _default_partition(node))}
