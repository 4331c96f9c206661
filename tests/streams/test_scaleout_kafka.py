"""Three concurrent workers, one killed mid-stream and one joining late, make what one worker makes.

A mixed fleet workload (`tests.streams.scaleout_workload`: sixty nodes over twelve partitions) runs
twice on the real Kafka broker and PostgreSQL, each run with its own database and topics:

- the reference: one worker reads all of it;
- the scale-out: three worker processes in one consumer group read the first phase, one of them is
  killed with SIGKILL while it holds open multi-line records (the AER reports and SXid groups the
  first phase ends in), the second phase is published while the group rebalances, and a fourth
  worker joins.

The two runs must agree on everything that does not depend on timing: the incidents (fingerprint,
component, counts, classification, state), the fault events (each record parsed whole, which
report counted), the action requests and the incident changes published. Nothing is duplicated or lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from history.tables import OutboxMessage
from models.node_records import NodeRecord
from models.topics import topology
from streams.runner import WorkerProcess, consumer_lag, produce
from streams.settings import WorkerSettings
from streams.store import Store
from tests import store_reads
from tests.polling import poll
from tests.services import fresh_postgres_database
from tests.streams.scaleout_workload import NODES, canonical, workload
from tests.streams.workers import worker_settings

PARTITIONS = 12
WAIT_S = 240.0  # a generous bound for a run to go idle on a loaded 2-core machine


@pytest.fixture
def second_database(postgres_url: str) -> Iterator[str]:
    with fresh_postgres_database(postgres_url) as url:
        yield url


def _settings(kafka_bootstrap: str, url: str, tmp_path: Path, name: str) -> Iterator[WorkerSettings]:
    # Records close on their node's next line (each node ends with a line that is no fault), never by
    # the idle flush, so what is stored does not depend on how long a worker waited.
    yield from worker_settings(kafka_bootstrap, url, tmp_path / name, name, partitions=PARTITIONS,
                               cluster="lab", parser_idle_flush_s=600.0)


@pytest.fixture
def reference(kafka_bootstrap: str, postgres_database: str, tmp_path: Path) -> Iterator[WorkerSettings]:
    yield from _settings(kafka_bootstrap, postgres_database, tmp_path, "so-ref")


@pytest.fixture
def scaled(kafka_bootstrap: str, second_database: str, tmp_path: Path) -> Iterator[WorkerSettings]:
    yield from _settings(kafka_bootstrap, second_database, tmp_path, "so-three")


class Workers:
    """Worker processes of one run; every one started is killed at the end."""

    def __init__(self, settings: WorkerSettings, logs: Path) -> None:
        self.settings, self.logs = settings, logs
        self.started: list[WorkerProcess] = []

    def start(self) -> WorkerProcess:
        w = WorkerProcess(self.settings, self.logs / f"worker-{len(self.started)}.log").start()
        self.started.append(w)
        return w

    def alive(self) -> list[WorkerProcess]:
        return [w for w in self.started if w.alive()]

    def check(self) -> None:
        dead = [w for w in self.started if not w.alive() and w.proc is not None and w.proc.returncode != -9]
        if dead:
            raise AssertionError(f"a worker died:\n{dead[0].log_tail()}")

    def stop(self) -> None:
        for w in self.started:
            w.kill()


def _outbox_ids(url: str) -> set[int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return set(conn.execute(sa.select(OutboxMessage.id)).scalars())
    finally:
        engine.dispose()


def _published_ids(settings: WorkerSettings) -> set[int]:
    """The outbox ids on the incidents and actions topics (each message names its row in a header)."""
    from kafka import KafkaConsumer, TopicPartition

    topo = topology(settings.topic_prefix, PARTITIONS)
    consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    try:
        parts = [TopicPartition(t, p) for t in (topo.incidents.name, topo.actions.name) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        ids: set[int] = set()
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in parts) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                ids.update(int(v) for m in batch for k, v in m.headers if k == "xidpipe-outbox-id")
        return ids
    finally:
        consumer.close()


def _idle(settings: WorkerSettings, workers: Workers) -> bool:
    """Every input message committed and every outbox row published."""
    workers.check()
    return (consumer_lag(settings.bootstrap_servers, settings) == 0
            and _outbox_ids(settings.database_url) <= _published_ids(settings))


def _wait_idle(settings: WorkerSettings, workers: Workers) -> None:
    def context() -> str:
        tails = "\n".join(w.log_tail(2000) for w in workers.alive())
        return f"lag {consumer_lag(settings.bootstrap_servers, settings)}:\n{tails}"

    poll("every input committed and every outbox row published", lambda: _idle(settings, workers), WAIT_S,
         interval=0.5, context=context)


def _partitions_used(settings: WorkerSettings) -> set[int]:
    from kafka import KafkaConsumer, TopicPartition

    topic = topology(settings.topic_prefix, PARTITIONS).kernel.name
    consumer = KafkaConsumer(bootstrap_servers=settings.bootstrap_servers)
    try:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
        return {tp.partition for tp, end in ends.items() if end > 0}
    finally:
        consumer.close()


def _state_stored(settings: WorkerSettings, state: list[NodeRecord], workers: Workers) -> None:
    produce(settings.bootstrap_servers, topology(settings.topic_prefix, PARTITIONS), state)
    store = Store(settings.database_url)
    try:
        def stored() -> bool:
            workers.check()
            return store_reads.counts(store)["node_state"] >= len(state)

        poll("node state stored", stored, WAIT_S)
    finally:
        store.dispose()


def _run_reference(settings: WorkerSettings, state: list[NodeRecord], records: list[NodeRecord],
                   logs: Path) -> dict[str, Any]:
    workers = Workers(settings, logs)
    try:
        workers.start()
        _state_stored(settings, state, workers)
        produce(settings.bootstrap_servers, topology(settings.topic_prefix, PARTITIONS), records)
        assert _partitions_used(settings) == set(range(PARTITIONS)), "every partition carries kernel lines"
        _wait_idle(settings, workers)
    finally:
        workers.stop()
    return canonical(settings.database_url)


def _run_scaled(settings: WorkerSettings, state: list[NodeRecord], first: list[NodeRecord],
                second: list[NodeRecord], logs: Path) -> dict[str, Any]:
    topo = topology(settings.topic_prefix, PARTITIONS)
    workers = Workers(settings, logs)
    store = Store(settings.database_url)
    try:
        three = [workers.start() for _ in range(3)]
        _state_stored(settings, state, workers)
        produce(settings.bootstrap_servers, topo, first)
        poll("three workers sharing the partitions", lambda: _group(settings) == ("Stable", 3), WAIT_S)
        # Phase one stored: the nodes' complete records. Each node's last line is an open record (a
        # kmsg line waits for its continuation, an AER report or SXid group for its next lines): its
        # lines, and the later messages of their partitions, stay uncommitted.
        want = {n for i, n in enumerate(NODES) if i % 6 in (1, 3)}  # the nodes with a complete fault in it
        poll("phase one stored", lambda: {e["node"] for e in store_reads.fault_events(store)} >= want, WAIT_S)
        assert consumer_lag(settings.bootstrap_servers, settings) > 0, "the open records' lines are committed"
        three[0].kill()  # SIGKILL mid-stream: it holds open records of its partitions

        def publish() -> None:
            for i in range(0, len(second), 40):
                produce(settings.bootstrap_servers, topo, second[i:i + 40], linger_ms=1)
                time.sleep(0.3)

        producer = threading.Thread(target=publish, name="scaleout-producer")
        producer.start()
        time.sleep(2.0)
        workers.start()  # a fourth worker joins while the group rebalances
        producer.join(120)
        assert not producer.is_alive()
        _wait_idle(settings, workers)
    finally:
        store.dispose()
        workers.stop()
    return canonical(settings.database_url)


def _group(settings: WorkerSettings) -> tuple[str, int]:
    """The worker group's state and number of members."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    try:
        group = admin.describe_groups([settings.app_id])[settings.app_id]
        return str(group.get("group_state")), len(group.get("members") or ())
    finally:
        admin.close()


def _diff(a: Any, b: Any) -> str:
    if hasattr(a, "keys"):
        return (f"only in the reference: {sorted((a - b).items())[:8]}\n"
                f"only in the scale-out: {sorted((b - a).items())[:8]}")
    return f"{sorted(set(a) ^ set(b))[:10]}"


def test_three_workers_with_a_crash_and_a_late_joiner_equal_one(
    reference: WorkerSettings, scaled: WorkerSettings, tmp_path: Path
) -> None:
    started = time.monotonic()
    state, first, second = workload()
    one = _run_reference(reference, state, [*first, *second], tmp_path / "one")
    many = _run_scaled(scaled, state, first, second, tmp_path / "many")
    print(f"reference and scale-out runs: {time.monotonic() - started:.0f} s")

    # The reference is what the workload means: every kind of incident is there.
    components = {k[2] for k in one["incidents"]}
    assert components == {"gpu", "nvswitch", "workload", "fleet"}, components
    assert sum(1 for k in one["incidents"] if k[2] == "workload") == 2  # one per workload, across nodes
    assert {k[3] for k in one["incidents"] if k[2] == "fleet"} >= {"memory", "gpu_lost", "nvlink", "nvswitch"}
    lines = {(k[3], k[4]) for k in one["fault_events"]}  # multi-line records parsed whole
    assert {("AER", 4), ("SXid 12028", 3), ("fallen off the bus", 3)} <= lines, sorted(lines)

    differ = [f"{part} differ:\n{_diff(one[part], many[part])}" for part in
              ("fault_events", "incidents", "actions", "changes", "cordon_candidates") if many[part] != one[part]]
    assert not differ, "\n".join(differ)
    # Nothing twice: every incident, fault event and request is one row.
    for part in ("incidents", "fault_events", "actions"):
        assert max(many[part].values()) == 1, [k for k, n in many[part].items() if n > 1][:5]
