"""The worker end to end: a real Faust worker subprocess, the real Kafka broker, real PostgreSQL.

- raw node records in → the expected incidents and fault events in SQL, updates and actions out;
- poison messages land in the dead-letter topic with reason and original bytes, the stream goes on;
- SIGTERM and SIGKILL of the worker mid-stream lose no fault and duplicate no event or incident.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from models.node_records import NodeRecord
from models.topics import Topology, topology
from streams.runner import WorkerProcess, produce, wait_caught_up
from streams.settings import WorkerSettings
from streams.store import Store
from tests import store_reads
from tests.polling import poll
from tests.streams.records import T0, Kmsg, inventory, nvml_xid, pods, processes, s, serial, uuid
from tests.streams.workers import worker_settings, worker_starter


@pytest.fixture
def settings(kafka_bootstrap: str, postgres_database: str, tmp_path: Path) -> Iterator[WorkerSettings]:
    yield from worker_settings(kafka_bootstrap, postgres_database, tmp_path, "worker", partitions=2, cluster="lab")


@pytest.fixture
def workers(settings: WorkerSettings, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    yield from worker_starter(settings, tmp_path)


def read_topic(bootstrap: str, topic: str, want: int, timeout: float = 20.0,
               until: Callable[[list[Any]], bool] | None = None) -> list[Any]:
    """Messages of `topic` from the start: at least `want` of them, or until `until(messages)` holds."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None)
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    done = until or (lambda msgs: len(msgs) >= want)
    try:
        while not done(out) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                out.extend(batch)
    finally:
        consumer.close()
    return out


def send_raw(bootstrap: str, topic: str, key: bytes, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for v in values:
            p.send(topic, key=key, value=v)
        p.flush(30)
    finally:
        p.close(5)


def test_end_to_end_with_a_poison_message(settings: WorkerSettings, workers: Callable[[], WorkerProcess]) -> None:
    topo = topology(settings.topic_prefix, settings.partitions)
    a, b, c = Kmsg("gpu-a"), Kmsg("gpu-b"), Kmsg("gpu-c")
    state: list[NodeRecord] = [
        inventory("gpu-a", T0), inventory("gpu-b", T0),
        pods("gpu-a", T0 + s(1), {0: ("ml", "train-7d9f8c6b5-abcde", "main"), 1: ("ml", "infer-0", "srv")}),
        processes("gpu-a", T0 + s(2), {4242: 0}),
    ]
    before: list[NodeRecord] = [
        a.xid(0, 13, T0 + s(10), 4242, "python3"),
        nvml_xid("gpu-a", 0, 13, T0 + s(10.2), 1),  # the NVML view of the same fault
        b.xid(3, 79, T0 + s(20), text="GPU has fallen off the bus."),
        *c.identity(2, T0),  # gpu-c publishes no inventory: the kernel's identity lines name its GPU
    ]
    storm = [c.xid(2, 48, T0 + s(30 + i * 0.001), text="An uncorrectable double bit error (DBE)") for i in range(300)]
    # The nodes' state is read first: state and faults travel on different topics, and the incidents of
    # the other read order are tests/streams/test_late_state_regroup.py's subject.
    produce(settings.bootstrap_servers, topo, state)
    worker = workers()
    wait_caught_up(settings, 90, worker)
    produce(settings.bootstrap_servers, topo, [*before, *storm])
    poison = [b"\x00\x01 definitely not json", b'{"kind": "kernel_line", "node": "gpu-a"}']
    send_raw(settings.bootstrap_servers, topo.kernel.name, b"gpu-a", poison)
    after_poison = a.xid(1, 31, T0 + s(40), 5151, "server", text="MMU Fault: ENGINE GRAPHICS")
    produce(settings.bootstrap_servers, topo, [after_poison])
    wait_caught_up(settings, 90, worker)
    store = Store(settings.database_url)
    try:
        poll("four incidents", lambda: len(store_reads.incidents(store)) == 4, 30, worker)
        incidents = {(i["node"], i["gpu_uuid"], i["family"]): i for i in store_reads.incidents(store)}
        events = store_reads.fault_events(store)
        unsent = poll("outbox drained", lambda: not store.unsent(older_than_s=-1) or None, 30, worker)
        assert unsent
    finally:
        store.dispose()

    assert set(incidents) == {
        ("gpu-a", uuid("gpu-a", 0), "application"),
        ("gpu-a", uuid("gpu-a", 1), "application"),
        ("gpu-b", uuid("gpu-b", 3), "gpu_lost"),
        ("gpu-c", uuid("gpu-c", 2), "memory"),
    }
    app0 = incidents[("gpu-a", uuid("gpu-a", 0), "application")]
    assert app0["count"] == 1 and app0["category"] == "application" and app0["serial"] == serial("gpu-a", 0)
    assert app0["pods"] == ["ml/train-7d9f8c6b5-abcde/main"] and app0["processes"] == ["python3[4242]"]
    assert app0["immediate_action"] == "RESTART_APP"
    lost = incidents[("gpu-b", uuid("gpu-b", 3), "gpu_lost")]
    assert lost["category"] == "hardware"
    mem = incidents[("gpu-c", uuid("gpu-c", 2), "memory")]
    assert mem["count"] == 300 and mem["serial"] == serial("gpu-c", 2) and mem["status"] == "open"
    # The message after the poison was handled.
    late = incidents[("gpu-a", uuid("gpu-a", 1), "application")]
    assert late["pods"] == ["ml/infer-0/srv"]

    assert len(events) == 1 + 1 + 300 + 1
    merged = [e for e in events if e["sources"] == "kernel+nvml"]
    assert len(merged) == 1 and merged[0]["raw"].startswith("NVRM: Xid (PCI:0000:18:00): 13")
    assert all(e["raw"] for e in events)

    _assert_dead_letters(settings.bootstrap_servers, topo, poison)
    _assert_published(settings.bootstrap_servers, topo, {i["incident_id"] for i in incidents.values()})
    assert worker.terminate(30) == 0


def _assert_dead_letters(bootstrap: str, topo: Topology, poison: list[bytes]) -> None:
    """The poison messages are on the kernel topic's dead-letter twin, with reason and original bytes."""
    dead = read_topic(bootstrap, topo.kernel.dead_letter, want=2)
    assert len(dead) == 2
    bodies = [json.loads(m.value) for m in dead]
    assert [base64.b64decode(b["value_b64"]) for b in bodies] == poison
    assert [b["reason"] for b in bodies] == ["undecodable", "invalid"]
    assert {b["topic"] for b in bodies} == {topo.kernel.name}
    assert all(m.key == b"gpu-a" and b["offset"] >= 0 for m, b in zip(dead, bodies, strict=True))


def _assert_published(bootstrap: str, topo: Topology, want_ids: set[str]) -> None:
    """Every incident was published as opened and got a ticket action; gpu-b and gpu-c (not gpu-a's jobs,
    whose incidents are their workloads') a cordon candidate."""
    def opened_ids(msgs: list[Any]) -> set[str]:
        return {json.loads(m.value)["incident"]["incident_id"] for m in msgs
                if json.loads(m.value)["change"] == "opened"}

    updates = read_topic(bootstrap, topo.incidents.name, want=0, until=lambda msgs: opened_ids(msgs) >= want_ids)
    opened = opened_ids(updates)
    assert opened == want_ids
    def actions_of(msgs: list[Any]) -> list[dict[str, Any]]:
        return [json.loads(m.value) for m in msgs]

    actions = actions_of(read_topic(
        bootstrap, topo.actions.name, want=0,
        until=lambda msgs: {x["incident_id"] for x in actions_of(msgs) if x["kind"] == "ticket"} >= opened
        and {x["node"] for x in actions_of(msgs) if x["kind"] == "cordon_candidate"} >= {"gpu-b", "gpu-c"}))
    cordons = [x for x in actions if x["kind"] == "cordon_candidate"]
    # The worker offers a candidate on every change of a GPU's incident; the YAML policy decides (its
    # `application` rule never cordons).
    assert {x["node"] for x in cordons} >= {"gpu-b", "gpu-c"}, cordons
    assert all(x["family"] == "application" for x in cordons if x["node"] == "gpu-a"), cordons
    assert {x["incident_id"] for x in actions if x["kind"] == "ticket"} == opened


def _restart_records() -> list[NodeRecord]:
    nodes = [f"rs-{i}" for i in range(4)]
    out: list[NodeRecord] = [inventory(n, T0) for n in nodes]
    kmsg = {n: Kmsg(n) for n in nodes}
    kinds = [(48, "An uncorrectable double bit error (DBE)"), (79, "GPU has fallen off the bus."),
             (74, "NVLink: fatal error detected on link 3")]
    for i in range(2400):
        n = nodes[i % 4]
        xid, text = kinds[(i // 4) % 3]
        out.append(kmsg[n].xid((i // 12) % 4, xid, T0 + s(10 + i * 0.01), text=text))
    return out


def _one_process(records: list[NodeRecord], settings: WorkerSettings,
                 tmp_path: Path) -> dict[tuple[str, str, str], int]:
    from tests.streams.test_store import feed, items_of

    store = Store(f"sqlite:///{tmp_path / 'one-process.db'}", settings.policy)
    try:
        store.create_schema()
        feed(store, items_of(records))
        return {(i["node"], i["gpu_uuid"], i["family"]): i["count"] for i in store_reads.incidents(store)
                if i["component"] != "fleet"}
    finally:
        store.dispose()


def test_sigterm_and_sigkill_mid_stream_lose_and_duplicate_nothing(
    settings: WorkerSettings, workers: Callable[[], WorkerProcess], tmp_path: Path
) -> None:
    topo = topology(settings.topic_prefix, settings.partitions)
    records = _restart_records()
    faults = [r for r in records if r.kind == "kernel_line"]
    # What one worker makes of the same records in one process, without Kafka: the run with workers
    # stopped and killed mid-stream must end with exactly the same incidents and counts.
    expected_incidents = _one_process(records, settings, tmp_path)
    assert len(expected_incidents) == 16  # one per GPU: 4 nodes x 4 GPUs

    # The producer keeps publishing while workers come and go.
    def publish() -> None:
        chunk = 60
        for i in range(0, len(records), chunk):
            produce(settings.bootstrap_servers, topo, records[i:i + chunk], linger_ms=1)
            time.sleep(0.5)

    producer = threading.Thread(target=publish, name="test-producer")
    producer.start()
    store = Store(settings.database_url)
    try:
        first = workers()
        poll("first events", lambda: store_reads.counts(store)["fault_events"] > 200, 60, first)
        assert first.terminate(30) == 0  # SIGTERM: clean stop mid-stream
        assert producer.is_alive()

        second = workers()
        seen = store_reads.counts(store)["fault_events"]
        poll("more events", lambda: store_reads.counts(store)["fault_events"] > seen + 200, 60, second)
        second.kill()  # SIGKILL mid-stream: no commit, no goodbye
        assert producer.is_alive() and store_reads.counts(store)["fault_events"] < len(faults)

        third = workers()
        producer.join(120)
        assert not producer.is_alive()
        wait_caught_up(settings, 120, third)
        poll("outbox drained", lambda: not store.unsent(older_than_s=-1) or None, 30, third)

        events = store_reads.fault_events(store)
        incidents = store_reads.incidents(store)
        assert third.terminate(30) == 0
    finally:
        producer.join(5)
        store.dispose()

    assert len(events) == len(faults), "every fault exactly once"
    assert len({(e["node"], e["record_id"]) for e in events}) == len(faults)
    incidents = [i for i in incidents if i["component"] != "fleet"]  # fleet bursts depend on arrival timing
    got = {(i["node"], i["gpu_uuid"], i["family"]): i["count"] for i in incidents}
    assert len(incidents) == len(expected_incidents), "one incident per component, as in one process"
    assert got == expected_incidents
    assert all(i["status"] == "open" for i in incidents)


def test_quiet_incident_is_resolved_and_a_recurrence_reopens_it(
    settings: WorkerSettings, tmp_path: Path
) -> None:
    from models.stream_policy import PipelinePolicy

    st = settings.model_copy(update={"policy": PipelinePolicy(quiet_period_s=3.0)})
    topo = topology(st.topic_prefix, st.partitions)
    k = Kmsg("quiet-node")
    produce(st.bootstrap_servers, topo, [inventory("quiet-node", T0), k.xid(0, 94, T0 + s(1), text="Contained")])
    worker = WorkerProcess(st, tmp_path / "quiet.log").start()
    store = Store(st.database_url)
    try:
        first = poll("the incident resolved by the sweep",
                     lambda: [i for i in store_reads.incidents(store) if i["status"] == "resolved"], 60, worker)[0]
        produce(st.bootstrap_servers, topo, [k.xid(0, 94, T0 + s(600), text="Contained")])
        incidents = poll("the recurrence",
                         lambda: len(store_reads.incidents(store)) == 2 and store_reads.incidents(store), 30, worker)
        assert worker.terminate(30) == 0
    finally:
        worker.kill()
        store.dispose()
    again = next(i for i in incidents if i["incident_id"] != first["incident_id"])
    assert again["status"] == "open" and again["previous_incident_id"] == first["incident_id"]
    assert again["fingerprint"] == first["fingerprint"] and again["gpu_uuid"] == uuid("quiet-node", 0)
    def lifecycle(msgs: list[Any]) -> list[str]:  # "attributed" may come between, when state was read late
        return [c for m in msgs if (c := json.loads(m.value)["change"]) in ("opened", "resolved", "reopened")]

    msgs = read_topic(st.bootstrap_servers, topo.incidents.name, want=0, until=lambda ms: len(lifecycle(ms)) >= 3)
    assert lifecycle(msgs)[:3] == ["opened", "resolved", "reopened"]
