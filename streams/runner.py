"""Drive the stream worker from outside: start it as a subprocess, feed it node records, wait until
it has handled them, read the incidents. Used by the demo, the tests and the benchmark.

    incidents = run_pipeline_once("127.0.0.1:9092", "sqlite:///var/demo.db", records, timeout=60)
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from history.engine import make_engine
from history.incident_rows import all_incidents
from models.kafka_security import KafkaClientSecurity
from models.node_records import NodeRecord, encode_node_record
from models.topics import Topology, topology
from models.wire import topic_for
from service.config import env_name
from streams.settings import WorkerSettings
from streams.topics import aiokafka_security
from streams.worker import prepare


def worker_env(settings: WorkerSettings) -> dict[str, str]:
    """The environment that makes `python -m streams.worker` run with `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_") or k.startswith("XIDPIPE_TEST_")}
    data = settings.model_dump(mode="json", exclude={"policy"})
    if settings.sasl_password is not None:  # dumped masked: the child needs the value itself
        data["sasl_password"] = settings.sasl_password.get_secret_value()
    for key, value in data.items():
        if value is None:
            continue
        env[env_name(WorkerSettings, key)] = str(value).lower() if isinstance(value, bool) else str(value)
    for key, value in settings.policy.model_dump(mode="json").items():
        env[f"XIDPIPE_WORKER_POLICY__{key.upper()}"] = (
            _json(value) if isinstance(value, list | tuple | dict) else str(value)
        )
    return env


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _die_with_parent() -> None:
    """In the child: the kernel sends it SIGTERM when the process that started it dies."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class WorkerProcess:
    """A stream worker in a subprocess of its own session; its output goes to `log_path`."""

    def __init__(self, settings: WorkerSettings, log_path: Path) -> None:
        self.settings = settings
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streams.worker"], env=worker_env(self.settings), stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        return self.proc.returncode

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def produce(bootstrap: str, topo: Topology, records: Iterable[NodeRecord], linger_ms: int = 5, *,
            security: KafkaClientSecurity | None = None, headers: list[tuple[str, bytes]] | None = None) -> int:
    """Publish records the way the node agent does (keyed by node, to their topic, as the agent's
    principal given by `security`, with its identity `headers`); returns the count."""
    from kafka import KafkaProducer

    names = {t.role: t.name for t in topo.inputs}
    base_role = {"xidpipe.node.kernel": "kernel", "xidpipe.node.state": "state", "xidpipe.node.nvml": "nvml",
                 "xidpipe.node.evidence": "evidence", "xidpipe.node.kube": "kube"}
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=linger_ms, acks="all",
                             **(security.kafka_python_options() if security else {}))
    n = 0
    try:
        for rec in records:
            producer.send(names[base_role[topic_for(rec)]], key=rec.node.encode(), value=encode_node_record(rec),
                          headers=headers)
            n += 1
        producer.flush(60)
    finally:
        producer.close(10)
    return n


async def group_lag(bootstrap: str, group: str, topics: list[str], security: KafkaClientSecurity | None = None) -> int:
    """Messages on `topics` not yet committed by consumer group `group`."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **aiokafka_security(security))
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **aiokafka_security(security))
    await admin.start()
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in topics for p in (consumer.partitions_for_topic(t) or ())]
        if not parts:
            await consumer._client.force_metadata_update()  # first metadata of fresh topics
            parts = [TopicPartition(t, p) for t in topics for p in (consumer.partitions_for_topic(t) or ())]
        ends = await consumer.end_offsets(parts)
        try:
            committed = await admin.list_consumer_group_offsets(group)
        except KafkaError:  # no coordinator for a group that never committed yet
            committed = {}
        lag = 0
        for tp in parts:
            meta = committed.get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else 0
            lag += max(0, ends[tp] - done)
        return lag
    finally:
        await consumer.stop()
        await admin.close()


def consumer_lag(bootstrap: str, settings: WorkerSettings) -> int:
    """Messages on the input topics not yet committed by the worker's consumer group."""
    topo = topology(settings.topic_prefix, settings.partitions)
    return asyncio.run(group_lag(bootstrap, settings.app_id, [t.name for t in topo.inputs], settings))


def wait_caught_up(settings: WorkerSettings, timeout: float, worker: WorkerProcess | None = None) -> None:
    """Wait until the worker committed every input message; raises TimeoutError with the worker's log."""
    deadline = time.monotonic() + timeout
    while True:
        lag = consumer_lag(settings.bootstrap_servers, settings)
        if lag == 0:
            return
        if worker is not None and not worker.alive():
            raise RuntimeError(f"worker exited with {worker.proc.returncode if worker.proc else None}:\n"
                               f"{worker.log_tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker still {lag} messages behind after {timeout:.0f} s:\n"
                               f"{worker.log_tail() if worker else ''}")
        time.sleep(0.3)


def run_pipeline_once(
    bootstrap: str,
    db_url: str,
    records: Iterable[NodeRecord],
    timeout: float = 120.0,
    *,
    workdir: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Replay `records` through a fresh worker and return the incidents in the database.

    The run uses topics and a consumer group of its own (a unique prefix), so it neither sees nor
    disturbs other runs on the broker. It publishes the records, starts `python -m streams.worker`,
    waits until the worker committed all of them (the lines of a kernel record are committed once
    the record is stored, after the idle flush for the last one of a node), stops it with SIGTERM,
    and reads the incidents table of `db_url`.
    """
    run = uuid.uuid4().hex[:8]
    workdir = workdir or Path("var") / f"pipeline-{run}"
    settings = WorkerSettings(
        bootstrap_servers=bootstrap, database_url=db_url, app_id=f"xidpipe-replay-{run}",
        topic_prefix=f"replay-{run}.", partitions=2, datadir=workdir / "faust",
        session_timeout_s=6.0, heartbeat_interval_s=1.0, commit_interval_s=0.5, **dict(overrides or {}),
    )
    prepare(settings)
    produce(bootstrap, topology(settings.topic_prefix, settings.partitions), records)
    worker = WorkerProcess(settings, workdir / "worker.log").start()
    try:
        wait_caught_up(settings, timeout, worker)
        worker.terminate()
    finally:
        worker.kill()
    engine = make_engine(db_url)
    try:
        return all_incidents(engine)
    finally:
        engine.dispose()
