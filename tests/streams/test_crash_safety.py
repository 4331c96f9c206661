"""No fault lost across a worker crash: a kernel record still open when its lines' batch committed.

The worker stores a batch and acknowledges its messages, but a multi-line record (here the driver's
three-line "fallen off the bus" notice) is complete only when its last line arrives. Its first lines
must stay uncommitted in Kafka until the record is stored, so that a worker killed in between (or
stopped) leaves them to the next one, which assembles the whole record and stores it once.
A real Faust worker subprocess, the real Kafka broker, real PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from models.node_records import NodeRecord
from models.topics import topology
from streams.runner import WorkerProcess, consumer_lag, produce, wait_caught_up
from streams.settings import WorkerSettings
from streams.store import Store
from tests import store_reads
from tests.polling import poll
from tests.streams.records import T0, Kmsg, inventory, pci, s, uuid
from tests.streams.workers import worker_settings, worker_starter

NOTICE = (f"NVRM: The NVIDIA GPU {pci(1)}", "NVRM: (PCI ID: 10de:2330) installed in this system has",
          "NVRM: fallen off the bus and is not responding to commands.")


@pytest.fixture
def settings(kafka_bootstrap: str, postgres_database: str, tmp_path: Path) -> Iterator[WorkerSettings]:
    # The open record is closed by its last line, never by the idle flush.
    yield from worker_settings(kafka_bootstrap, postgres_database, tmp_path, "crash", partitions=1,
                               parser_idle_flush_s=600.0)


@pytest.fixture
def workers(settings: WorkerSettings, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    yield from worker_starter(settings, tmp_path)


def events_of(store: Store, node: str) -> list[dict[str, Any]]:
    return [e for e in store_reads.fault_events(store) if e["node"] == node]


@pytest.mark.parametrize("stop", ["sigkill", "sigterm"])
def test_a_record_open_when_its_batch_committed_survives_the_worker(
    stop: str, settings: WorkerSettings, workers: Callable[..., WorkerProcess]
) -> None:
    topo = topology(settings.topic_prefix, settings.partitions)
    bus, other = Kmsg("bus-0"), Kmsg("calm-0")
    lines = [bus.line(text, T0 + s(10 + i * 0.001)) for i, text in enumerate(NOTICE)]
    # One partition: the other node's Xid comes after the open record's lines, in the same partition.
    first: list[NodeRecord] = [inventory("bus-0", T0), *lines[:2], other.xid(0, 48, T0 + s(11), text="DBE")]
    produce(settings.bootstrap_servers, topo, first)
    store = Store(settings.database_url)
    try:
        worker = workers()
        poll("the other node's fault", lambda: events_of(store, "calm-0"), 60, worker)
        # The inventory (state topic) is committed; the kernel partition stops before the notice.
        poll("the batch's commit", lambda: consumer_lag(settings.bootstrap_servers, settings) <= 3, 30, worker)
        time.sleep(settings.commit_interval_s * 3)  # a commit past the notice, if any, would have come by now
        assert events_of(store, "bus-0") == []  # the notice is still open in the worker's parser
        held = consumer_lag(settings.bootstrap_servers, settings)
        assert held == 3, "the open record's two lines and the line after them are not committed"
        if stop == "sigkill":
            worker.kill()
        else:
            assert worker.terminate(30) == 0

        produce(settings.bootstrap_servers, topo, lines[2:])  # the notice's last line, after the restart
        # A complete record stays open until the node's next line or the idle flush: this worker flushes.
        worker = workers(parser_idle_flush_s=1.0)
        found = poll("the notice", lambda: events_of(store, "bus-0"), 60, worker)
        wait_caught_up(settings, 60, worker)
        time.sleep(1.0)  # a duplicate, if any, would be stored by now
        events = events_of(store, "bus-0")
        incidents = [i for i in store_reads.incidents(store) if i["node"] == "bus-0"]
        calm = events_of(store, "calm-0")
    finally:
        store.dispose()

    assert len(found) == 1 and len(events) == 1, "the record is stored exactly once"
    (event,) = events
    assert event["kind"] == "gpu_fallen_off_bus" and event["pci"] == pci(1)
    assert event["record_id"] == lines[0].record_id  # the record starts at its first line
    assert all(text.removeprefix("NVRM: ") in event["raw"] for text in NOTICE), event["raw"]
    assert len(incidents) == 1 and incidents[0]["count"] == 1
    assert incidents[0]["gpu_uuid"] == uuid("bus-0", 1)
    assert len(calm) == 1  # the other node's Xid, read again after the restart, is absorbed
