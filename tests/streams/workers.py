"""Stream workers as subprocesses for the Kafka tests: settings on a fresh topic prefix (topics
deleted afterwards) and a starter that kills what it started (`tests.polling.poll` watches them)."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from models.topics import topology
from streams.runner import WorkerProcess
from streams.settings import WorkerSettings
from streams.worker import prepare


def worker_settings(kafka_bootstrap: str, database_url: str, tmp_path: Path, name: str,
                    **overrides: Any) -> Iterator[WorkerSettings]:
    """Test-paced worker settings (topics and tables prepared); deletes the run's topics afterwards."""
    run = uuidlib.uuid4().hex[:8]
    st = WorkerSettings(
        bootstrap_servers=kafka_bootstrap, database_url=database_url, app_id=f"t-{name}-{run}",
        topic_prefix=f"t-{name}-{run}.", datadir=tmp_path / "faust", session_timeout_s=6.0,
        heartbeat_interval_s=1.0, commit_interval_s=0.5, sweep_interval_s=1.0, outbox_resend_after_s=1.0,
        **overrides,
    )
    prepare(st)
    yield st
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        topo = topology(st.topic_prefix, st.partitions)
        names = sorted({n for t in topo.all for n in t.names})
        names += [t for t in admin.list_topics() if t.startswith(st.app_id) and t not in names]
        admin.delete_topics(names)
    except Exception as exc:  # the broker may already be gone at session end
        print(f"could not delete topics of {st.topic_prefix}: {exc}")
    finally:
        admin.close()


def worker_starter(settings: WorkerSettings, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """`start(**setting_overrides)` runs a worker; every worker started is killed afterwards."""
    started: list[WorkerProcess] = []

    def start(**overrides: Any) -> WorkerProcess:
        st = settings.model_copy(update=overrides) if overrides else settings
        w = WorkerProcess(st, tmp_path / f"worker-{len(started)}.log").start()
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()

