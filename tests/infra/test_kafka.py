"""The local Apache Kafka broker: real clients against the real broker, and a clean stop."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from tests.services import service_unavailable
from xidpipe.localinfra import kafka as localkafka
from xidpipe.localinfra.process import LocalInfraError, pid_alive, port_in_use, process_cmdline

pytestmark = pytest.mark.kafka

TopicFactory = Callable[..., str]


def _consume(consumer: KafkaConsumer, count: int, timeout_s: float = 20.0) -> list[object]:
    records: list[object] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(batch)
    return records


def test_round_trip_acks_all_idempotent(kafka_bootstrap: str, kafka_topic_factory: TopicFactory) -> None:
    topic = kafka_topic_factory("round-trip", partitions=3)
    producer = KafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        acks="all",
        enable_idempotence=True,
    )
    sent: dict[str, list[int]] = defaultdict(list)
    placed: dict[str, set[int]] = defaultdict(set)
    offsets: dict[int, list[int]] = defaultdict(list)
    try:
        futures = []
        for seq in range(60):
            node = f"node-{seq % 5}"
            sent[node].append(seq)
            value = json.dumps({"node": node, "seq": seq}).encode()
            futures.append(producer.send(topic, key=node.encode(), value=value))
        producer.flush(timeout=20)
        for future in futures:
            meta = future.get(timeout=10)
            offsets[meta.partition].append(meta.offset)
    finally:
        producer.close(timeout=10)
    # Acknowledged by the broker exactly once each: offsets are dense from 0 in every partition.
    for partition, got in offsets.items():
        assert sorted(got) == list(range(len(got))), f"partition {partition} offsets {sorted(got)}"
    assert sum(len(v) for v in offsets.values()) == 60

    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        records = _consume(consumer, 60)
    finally:
        consumer.close()
    assert len(records) == 60
    received: dict[str, list[int]] = defaultdict(list)
    for record in records:
        key, value = record.key.decode(), json.loads(record.value)  # type: ignore[attr-defined]
        assert value["node"] == key
        received[key].append(value["seq"])
        placed[key].add(record.partition)  # type: ignore[attr-defined]
    # Keyed by node: each node's records sit in one partition, in the order they were sent.
    assert dict(received) == dict(sent)
    assert all(len(partitions) == 1 for partitions in placed.values())


def test_group_resumes_at_committed_offset(kafka_bootstrap: str, kafka_topic_factory: TopicFactory) -> None:
    topic = kafka_topic_factory("group-commit")
    group = f"g-{topic}"
    tp = TopicPartition(topic, 0)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        for i in range(10):
            producer.send(topic, value=f"m{i}".encode())
        producer.flush(timeout=20)
    finally:
        producer.close(timeout=10)

    def member() -> KafkaConsumer:
        consumer = KafkaConsumer(
            bootstrap_servers=kafka_bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        consumer.subscribe([topic])
        return consumer

    first = member()
    try:
        values = [r.value for r in _consume(first, 10)]  # type: ignore[attr-defined]
        assert values == [f"m{i}".encode() for i in range(10)]
        first.commit({tp: OffsetAndMetadata(6, "", -1)})  # as if only m0..m5 were handled
        assert first.committed(tp) == 6
    finally:
        first.close()

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        stored = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    assert stored[tp].offset == 6

    second = member()
    try:
        values = [r.value for r in _consume(second, 4)]  # type: ignore[attr-defined]
        assert values == [f"m{i}".encode() for i in range(6, 10)]
        second.commit()
        assert second.committed(tp) == 10
    finally:
        second.close()


def test_stop_kills_the_broker_by_pid_and_removes_its_data() -> None:
    broker = _started_broker()
    pid, port, work_dir, pid_file = broker.pid, broker.port, broker.work_dir, broker.pid_file
    try:
        assert pid_file.read_text().strip() == str(pid)
        assert "kafka.Kafka" in process_cmdline(pid)
        assert (work_dir / "data" / "meta.properties").is_file()
    finally:
        broker.stop()

    assert not pid_alive(pid)
    assert process_cmdline(pid) == []
    assert not work_dir.exists()
    assert not port_in_use(port)
    broker.stop()  # a second stop is harmless


def test_cli_start_status_stop_leaves_nothing_running(tmp_path: Path) -> None:
    state = tmp_path / "state"

    def dev(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "xidpipe.cli", "dev", "kafka", *args, "--state-dir", str(state)]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)

    started = dev("start")
    if started.returncode != 0:
        service_unavailable("Kafka", started.stderr.strip())
    bootstrap = started.stdout.strip()
    assert bootstrap.startswith("127.0.0.1:")
    pid = int((state / "kafka.pid").read_text())
    record = json.loads((state / "kafka.json").read_text())
    try:
        assert record["pid"] == pid and record["address"] == bootstrap
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            assert [b["port"] for b in admin.describe_cluster()["brokers"]] == [int(bootstrap.split(":")[1])]
        finally:
            admin.close()
        again = dev("start")  # already running: same broker, no second one
        assert again.returncode == 0 and again.stdout.strip() == bootstrap
        status = dev("status")
        assert status.returncode == 0 and f"pid {pid}" in status.stdout
    finally:
        stopped = dev("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"pid {pid}" in stopped.stdout
    assert not pid_alive(pid)
    assert not Path(record["work_dir"]).exists()
    assert not (state / "kafka.pid").exists() and not (state / "kafka.json").exists()
    assert dev("status").returncode == 3


def test_broker_that_dies_on_start_reports_its_error_and_leaves_nothing(tmp_path: Path) -> None:
    _require_jars()
    work_dir = tmp_path / "broker"
    # Accepted by the storage tool, fatal in the broker's heartbeat thread.
    broken = localkafka.LocalKafka(work_dir=work_dir, extra_properties={"broker.heartbeat.interval.ms": "-5"})
    with pytest.raises(LocalInfraError) as failure:
        broken.start()
    message = str(failure.value)
    assert "Kafka broker exited with status" in message
    assert "timeout should be >= 0" in message  # the cause, taken from the broker's log
    assert not work_dir.exists()
    leftover = subprocess.run(["pgrep", "-f", str(work_dir)], capture_output=True, text=True, check=False)
    assert leftover.stdout == ""


def test_busy_port_is_reported_before_anything_starts(tmp_path: Path) -> None:
    _require_jars()
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        with pytest.raises(LocalInfraError, match=rf"port {busy} on 127.0.0.1 is already in use"):
            localkafka.LocalKafka(port=busy, work_dir=tmp_path / "w").start()
    assert not (tmp_path / "w").exists()


def test_missing_jars_say_how_to_fetch_them(tmp_path: Path) -> None:
    _require_java()
    with pytest.raises(LocalInfraError, match=r"xidpipe dev kafka fetch"):
        localkafka.LocalKafka(cache=tmp_path / "empty-cache").start()


def _require_java() -> None:
    try:
        localkafka.find_java()
    except LocalInfraError as exc:
        service_unavailable("Kafka", str(exc))


def _require_jars() -> None:
    _require_java()
    if not localkafka.jars_complete(localkafka.cache_dir() / "lib"):
        service_unavailable("Kafka", f"no jars in {localkafka.cache_dir()}: {localkafka.FETCH_HINT}")


def _started_broker() -> localkafka.LocalKafka:
    broker = localkafka.LocalKafka()
    try:
        return broker.start()
    except LocalInfraError as exc:
        service_unavailable("Kafka", str(exc))
