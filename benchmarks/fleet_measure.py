"""What benchmarks/fleet_bench.py measures: consumer offsets and lag, worker memory, and the history's
figures in PostgreSQL (Xid → incident commit latency, database size per fault event).

The latency is read from PostgreSQL itself: with `track_commit_timestamp` on, the commit time of the
transaction that wrote a fault event row (`pg_xact_commit_timestamp(xmin)`) is the time its incident
row was committed (the worker writes a fault event and its incident in one transaction), and the
row's `occurred_at` is the kernel's event time (kmsg monotonic stamp + boot time, which the simulated
agent takes right before it produces the record). A row updated by a later transaction reports that
later commit, so the figure can only err high.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from xidpipe.localinfra.postgres import LocalPostgres


class BenchPostgres(LocalPostgres):
    """The throwaway cluster of the tests, with commit timestamps recorded (for the latency)."""

    def _initdb(self, port: int) -> None:
        super()._initdb(port)
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("track_commit_timestamp = on\n")


def new_database(server_url: str, name: str) -> str:
    """Create database `name` on the server of `server_url`; returns its URL."""
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)


class GroupOffsets:
    """The input topics' end offsets and a consumer group's committed offsets, summed."""

    def __init__(self, bootstrap: str, group: str, topics: Sequence[str]) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer

        self.group = group
        self.topics = list(topics)
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fleet-bench-offsets")
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                      client_id="fleet-bench-offsets")
        self._parts: list[Any] = []

    def _partitions(self) -> list[Any]:
        from kafka import TopicPartition

        if not self._parts:
            self._parts = [TopicPartition(t, p) for t in self.topics
                           for p in sorted(self.consumer.partitions_for_topic(t) or ())]
        return self._parts

    def sample(self) -> tuple[int, int]:
        """(messages on the input topics, messages the group committed)."""
        parts = self._partitions()
        ends = self.consumer.end_offsets(parts)
        committed = self.admin.list_group_offsets({self.group: parts}).get(self.group, {})
        done = 0
        for tp in parts:
            meta = committed.get(tp)
            done += meta.offset if meta is not None and meta.offset >= 0 else 0
        return sum(ends.values()), done

    def members(self) -> tuple[str, int]:
        """The group's state and its member count."""
        desc = self.admin.describe_groups([self.group]).get(self.group) or {}
        return str(desc.get("group_state") or desc.get("state") or ""), len(desc.get("members") or ())

    def close(self) -> None:
        self.consumer.close()
        self.admin.close()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in text.split())
    return found


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_bytes(pids: Iterable[int], field: str = "VmRSS") -> int:
    """Resident memory of each process and all its descendants (the worker's store process), summed.
    `field="VmHWM"`: each process's own peak so far, so the sum bounds the tree's peak from above even
    between two samples."""
    total, stack, seen = 0, list(pids), set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _status_kib(pid, field) * 1024
        stack.extend(_children(pid))
    return total


def hwm_by_process(pids: Iterable[int]) -> dict[str, int]:
    """Each worker's own peak resident memory (VmHWM) and its store process's, summed over the workers:
    which of the two grows with the fleet."""
    stream = store = 0
    for pid in pids:
        stream += _status_kib(pid, "VmHWM") * 1024
        store += sum(_status_kib(child, "VmHWM") * 1024 for child in _children(pid))
    return {"stream_bytes": stream, "store_bytes": store}


def percentiles(samples: Sequence[float]) -> dict[str, float | int | None]:
    if not samples:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"n": len(ordered), "p50": round(statistics.median(ordered), 1), "p99": round(p99, 1),
            "max": round(ordered[-1], 1)}


LATENCY_SQL = """
    SELECT process, EXTRACT(EPOCH FROM ({end} - occurred_at)) * 1000 AS ms
    FROM fault_events
    WHERE occurred_at >= :since AND occurred_at < :until AND sources LIKE 'kernel%'
"""
COMMIT_END = "pg_xact_commit_timestamp(xmin)"
START_END = "ingested_at"  # the start of the row's transaction: without commit timestamps, a lower bound


def latencies(db_url: str, since: datetime, until: datetime, burst_process: str) -> dict[str, Any]:
    """Xid → incident commit latency of the fault events whose event time falls in [since, until)."""
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            commits = conn.execute(sa.text("SHOW track_commit_timestamp")).scalar_one() == "on"
            end = COMMIT_END if commits else START_END
            rows = conn.execute(sa.text(LATENCY_SQL.format(end=end)), {"since": since, "until": until}).all()
    finally:
        engine.dispose()
    steady = [float(ms) for process, ms in rows if ms is not None and process != burst_process]
    burst = [float(ms) for process, ms in rows if ms is not None and process == burst_process]
    return {"until": "commit" if commits else "transaction start (track_commit_timestamp is off)",
            "steady_ms": percentiles(steady), "burst_ms": percentiles(burst), "all_ms": percentiles(steady + burst)}


SIZE_SQL = sa.text("""
    SELECT c.relname, pg_total_relation_size(c.oid) AS bytes
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind = 'r' AND n.nspname = 'public'
    ORDER BY bytes DESC
""")


def database_figures(db_url: str) -> dict[str, Any]:
    """Database size, rows of the main tables and each table's bytes (with its indexes and TOAST)."""
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            size = int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar_one())
            counts = {t: int(conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one())
                      for t in ("fault_events", "incidents", "node_state", "seen_records", "gpu_assignments")}
            tables = {name: int(b) for name, b in conn.execute(SIZE_SQL).all()}
    finally:
        engine.dispose()
    return {"database_bytes": size, "rows": counts, "tables_bytes": tables}


def incident_summary(db_url: str) -> dict[str, int]:
    """Incidents by component and category: what the fleet's faults became."""
    engine = sa.create_engine(db_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT component, category, count(*) FROM incidents GROUP BY component, category")).all()
    finally:
        engine.dispose()
    return {f"{component}/{category}": int(n) for component, category, n in rows}
