"""The recorded cluster live, as many node agents send it, against `xidpipe replay` of its directory.

Twelve nodes' records (`tests.recorded_cluster`: hundreds of faults over 60 hours of event time) are
published to the real broker as the node agents publish them (each node's records in its own order,
keyed by node; the nodes interleaved in runs of random length over four partitions) and read by a
real Faust worker on PostgreSQL, which cuts them into batches as they arrive. `xidpipe replay` of the
same directory, on PostgreSQL too, reads them node by node in event time, in large batches. The two
give the same incidents, field by field (`tests.recorded_cluster.incident_facts`: fingerprint,
component, codes, count, category, family, status, first and last fault, the actions asked for), and
the same fault events, once each; and so they do when the worker is killed mid-stream and another
reads again what it had not committed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from history.engine import make_engine
from history.tables import FaultEvent
from models.topics import topology
from streams.runner import WorkerProcess, produce, wait_caught_up
from streams.settings import WorkerSettings
from tests.polling import poll
from tests.recorded_cluster import incident_facts, interleaved, node_records, write_recording
from tests.services import fresh_postgres_database
from tests.streams.workers import worker_settings, worker_starter
from xidpipe.replay import run_replay

CLUSTER = "replay"  # the fleet incidents' cluster name: replay's, given to the worker too


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[tuple[Path, list[Any], int]]:
    """The recording, and what `xidpipe replay` of it stores on PostgreSQL: its incidents' facts and
    how many fault events."""
    root = tmp_path_factory.mktemp("recorded") / "cluster"
    write_recording(root)
    with fresh_postgres_database(postgres_url) as url:
        run_replay(root, database_url=url, cluster_name=CLUSTER)
        engine = make_engine(url)
        try:
            yield root, incident_facts(engine), _events(engine)
        finally:
            engine.dispose()


def _events(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(FaultEvent)).scalar() or 0)


def _hashes(engine: sa.Engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return sorted((n, h) for n, h in conn.execute(sa.select(FaultEvent.node, FaultEvent.content_hash)))


@pytest.fixture
def settings(kafka_bootstrap: str, postgres_database: str, tmp_path: Path) -> Iterator[WorkerSettings]:
    # Small batches: the worker cuts the nodes' hours into many transactions, each holding parts of several.
    yield from worker_settings(kafka_bootstrap, postgres_database, tmp_path, "order", partitions=4, cluster=CLUSTER,
                               batch_max=48)


@pytest.fixture
def workers(settings: WorkerSettings, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    yield from worker_starter(settings, tmp_path)


def _publish_state_then_kernel(settings: WorkerSettings, root: Path, worker: WorkerProcess, seed: int) -> int:
    """The nodes' state first (the agents start with it), then their kernel records interleaved;
    returns how many kernel records."""
    state, per_node = node_records(root)
    topo = topology(settings.topic_prefix, settings.partitions)
    produce(settings.bootstrap_servers, topo, state)
    wait_caught_up(settings, 120, worker)
    return produce(settings.bootstrap_servers, topo, interleaved(per_node, seed=seed))


def test_agents_interleaved_live_give_the_incidents_replay_gives(
        recorded: tuple[Path, list[Any], int], settings: WorkerSettings,
        workers: Callable[..., WorkerProcess]) -> None:
    root, replayed, events = recorded
    worker = workers()
    assert _publish_state_then_kernel(settings, root, worker, seed=11) > 500
    wait_caught_up(settings, 300, worker)
    engine = make_engine(settings.database_url)
    try:
        assert _events(engine) == events, "every fault event stored once"
        live = incident_facts(engine)
    finally:
        engine.dispose()
    assert live == replayed


def test_a_worker_killed_mid_stream_and_the_records_read_again_give_the_same_incidents(
        recorded: tuple[Path, list[Any], int], settings: WorkerSettings,
        workers: Callable[..., WorkerProcess]) -> None:
    root, replayed, events = recorded
    worker = workers()
    _publish_state_then_kernel(settings, root, worker, seed=12)
    engine = make_engine(settings.database_url)
    try:
        poll("a third of the fault events", lambda: _events(engine) >= events // 3 or None, 120, worker)
        worker.kill()  # SIGKILL: its transaction in flight is rolled back, its uncommitted offsets read again
        stored = _events(engine)
        assert stored < events, "killed before the end of the stream"
        again = workers()
        wait_caught_up(settings, 300, again)
        hashes = _hashes(engine)
        assert len(hashes) == len(set(hashes)) == events, "no fault event lost or stored twice"
        live = incident_facts(engine)
    finally:
        engine.dispose()
    assert live == replayed
