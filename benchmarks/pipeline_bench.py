#!/usr/bin/env python3
"""Stream worker throughput, latency and storm behaviour. Prints one JSON object.

Uses a local Kafka broker (started from the Maven jars unless --bootstrap is given) and a SQLite
database in a temporary directory (or --database-url), and runs the worker as `python -m
streams.worker`, as in production.

1. throughput: --events kernel Xid lines (64 GPUs on 8 nodes, so many incidents) published before
   the worker starts; fault events per second from the first to the last batch committed (the
   events committed in between, as the trivial agent counts the messages after its first), against
   a trivial Faust agent (decode JSON, count) on the same broker and the same records.
2. latency: --background-rate kernel Xid lines per second on background GPUs for --latency-seconds,
   plus one probe Xid every 0.2 s on a GPU of its own; latency from producing a probe to its
   incident update arriving on the incidents topic (published after the incident row committed).
3. storm: --storm lines of one Xid on one GPU within --storm-seconds; whether they make exactly one
   incident, and the time until the consumer lag is zero, from the start of the storm.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.node_records import KernelLine, encode_node_record
from models.topics import topology
from streams.runner import WorkerProcess, consumer_lag, produce
from streams.settings import WorkerSettings
from streams.store import Store
from streams.worker import prepare
from tests import store_reads

XID_TEXT = {13: "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
            48: "An uncorrectable double bit error (DBE) has been detected on GPU",
            74: "NVLink: fatal error detected on link 3"}


class Lines:
    def __init__(self) -> None:
        self.seq = 0

    def info(self, node: str, gpu: int) -> KernelLine:
        """A GPU-relevant line the agent forwards that is no fault."""
        self.seq += 1
        now = datetime.now(UTC)
        return KernelLine(node=node, record_id=f"kmsg:bench:{self.seq}", source="kmsg", fault=False,
                          boot_id="bench", seq=self.seq, observed_at=now, emitted_at=now,
                          message=f"NVRM: GPU 0000:{0x18 + 0x20 * gpu:02x}:00.0: persistence mode enabled")

    def xid(self, node: str, gpu: int, xid: int, pid: int = 4242) -> KernelLine:
        self.seq += 1
        now = datetime.now(UTC)
        bus = f"{0x18 + 0x20 * gpu:02x}"
        return KernelLine(node=node, record_id=f"kmsg:bench:{self.seq}", source="kmsg", fault=True, boot_id="bench",
                          seq=self.seq, observed_at=now, emitted_at=now,
                          message=f"NVRM: Xid (PCI:0000:{bus}:00): {xid}, pid={pid}, name=bench, {XID_TEXT[xid]}")


def settings_for(bootstrap: str, db_url: str, work: Path, name: str) -> WorkerSettings:
    run = uuid.uuid4().hex[:6]
    return WorkerSettings(bootstrap_servers=bootstrap, database_url=db_url, app_id=f"bench-{name}-{run}",
                          topic_prefix=f"bench-{name}-{run}.", partitions=2, datadir=work / f"faust-{name}",
                          session_timeout_s=6.0, heartbeat_interval_s=1.0, commit_interval_s=0.5,
                          log_level=os.environ.get("BENCH_LOG_LEVEL", "warn"))


def wait_lag_zero(st: WorkerSettings, timeout: float, worker: WorkerProcess) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if consumer_lag(st.bootstrap_servers, st) == 0:
            return time.monotonic()
        if not worker.alive():
            raise RuntimeError(worker.log_tail())
        time.sleep(0.2)
    raise TimeoutError(f"lag not zero after {timeout} s")


def bench_throughput(bootstrap: str, db_url: str, work: Path, events: int) -> dict[str, Any]:
    st = settings_for(bootstrap, db_url, work, "tput")
    prepare(st)
    lines = Lines()
    records = [lines.xid(f"node-{i % 8}", (i // 8) % 8, (13, 48, 74)[(i // 64) % 3]) for i in range(events)]
    produce(bootstrap, topology(st.topic_prefix, st.partitions), records)
    worker = WorkerProcess(st, work / "tput.log").start()
    try:
        wait_lag_zero(st, 600, worker)
    finally:
        worker.terminate()
    store = Store(db_url)
    try:
        rows = store_reads.fault_events(store)
        incidents = [i for i in store_reads.incidents(store) if i["node"].startswith("node-")]
    finally:
        store.dispose()
    mine = [r for r in rows if r["record_id"].startswith("kmsg:bench:")]
    # Each batch's events share its `ingested_at` (the start of its transaction). From the first batch's
    # start to the last batch's start, every event but the last batch's was committed: those count, as
    # the trivial agent counts the messages after its first one.
    times = sorted(datetime.fromisoformat(r["ingested_at"]) for r in mine)
    span = (times[-1] - times[0]).total_seconds() if len(times) > 1 else float("nan")
    done = sum(1 for t in times if t < times[-1])
    trivial = bench_trivial(bootstrap, work, records)
    return {
        "events": events, "fault_events_committed": len(mine), "incidents": len(incidents),
        "worker_events_per_s": round(done / span, 1) if span > 0 else None,
        "trivial_faust_agent_msgs_per_s": trivial,
    }


TRIVIAL_APP = '''
import json, sys, time, faust
bootstrap, app_id, topic, want, out, datadir = sys.argv[1:7]
want = int(want)
app = faust.App(app_id, broker=f"kafka://{bootstrap}", store="memory://", datadir=datadir, web_enabled=False,
                broker_session_timeout=6.0, broker_heartbeat_interval=1.0, topic_partitions=2,
                consumer_auto_offset_reset="earliest")
source = app.topic(topic, key_serializer="raw", value_serializer="raw")
seen = {"n": 0, "first": None}

@app.agent(source)
async def count(stream):
    async for value in stream:
        json.loads(value)
        seen["n"] += 1
        if seen["first"] is None:
            seen["first"] = time.monotonic()
        if seen["n"] == want:
            rate = (want - 1) / (time.monotonic() - seen["first"])
            open(out, "w").write(str(rate))

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "-l", "warn", "--without-web"]  # the CLI default would start the web server
    app.main()
'''


def bench_trivial(bootstrap: str, work: Path, records: list[KernelLine]) -> float | None:
    from kafka import KafkaAdminClient, KafkaProducer

    run = uuid.uuid4().hex[:6]
    topic = f"bench-trivial-{run}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1}})
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for r in records:
        producer.send(topic, key=r.node.encode(), value=encode_node_record(r))
    producer.flush(60)
    producer.close()
    script = work / "trivial_app.py"
    script.write_text(TRIVIAL_APP)
    out = work / "trivial.out"
    (work / "faust-trivial").mkdir(exist_ok=True)
    with open(work / "trivial.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(script), bootstrap, f"bench-trivial-{run}", topic,
                                 str(len(records)), str(out), str(work / "faust-trivial")],
                                stdout=log, stderr=subprocess.STDOUT, cwd=work)
    try:
        deadline = time.monotonic() + 300
        while not out.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
        return round(float(out.read_text()), 1) if out.exists() else None
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bench_latency(bootstrap: str, db_url: str, work: Path, rate: float, seconds: float,
                  fault_share: float) -> dict[str, Any]:
    from kafka import KafkaConsumer, KafkaProducer

    st = settings_for(bootstrap, db_url, work, "lat")
    prepare(st)
    topo = topology(st.topic_prefix, st.partitions)
    worker = WorkerProcess(st, work / "lat.log").start()
    consumer = KafkaConsumer(topo.incidents.name, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             group_id=None, enable_auto_commit=False)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1)
    lines = Lines()
    sent: dict[str, float] = {}
    received: dict[str, float] = {}
    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            for batch in consumer.poll(timeout_ms=200).values():
                now = time.monotonic()
                for m in batch:
                    body = json.loads(m.value)
                    node = body.get("incident", {}).get("node", "")
                    if node.startswith("probe-") and body.get("change") == "opened":
                        received.setdefault(node, now)

    def send(rec: KernelLine) -> None:
        producer.send(topo.kernel.name, key=rec.node.encode(), value=encode_node_record(rec))

    try:
        # Warm up: the worker has joined its group once a first probe comes back.
        send(lines.xid("probe-warmup", 0, 48))
        producer.flush()
        deadline = time.monotonic() + 90
        rx = threading.Thread(target=receive, daemon=True)
        rx.start()
        while "probe-warmup" not in received and time.monotonic() < deadline:
            if not worker.alive():
                raise RuntimeError(worker.log_tail())
            time.sleep(0.2)
        start = time.monotonic()
        next_probe = start
        n = 0
        interval = 1.0 / rate
        while time.monotonic() - start < seconds:
            node, gpu = f"bg-{n % 8}", (n // 8) % 8
            fault = (n * fault_share) % 1 + fault_share >= 1  # evenly spread: fault_share of the lines are Xids
            send(lines.xid(node, gpu, 48) if fault else lines.info(node, gpu))
            n += 1
            now = time.monotonic()
            if now >= next_probe:
                node = f"probe-{len(sent)}"
                sent[node] = time.monotonic()
                send(lines.xid(node, 1, 48))
                producer.flush()
                next_probe += 0.2
            sleep = start + n * interval - time.monotonic()
            if sleep > 0:
                time.sleep(sleep)
        producer.flush()
        background_rate = n / (time.monotonic() - start)
        wait_until = time.monotonic() + 30
        while len([k for k in sent if k in received]) < len(sent) and time.monotonic() < wait_until:
            time.sleep(0.2)
    finally:
        stop.set()
        worker.terminate()
        producer.close()
        consumer.close()
    lat = sorted((received[k] - t) * 1000 for k, t in sent.items() if k in received)
    return {
        "background_lines_per_s": round(background_rate, 1), "background_fault_share": fault_share,
        "probes": len(sent), "probes_seen": len(lat),
        "p50_ms": round(statistics.median(lat), 1) if lat else None,
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1) if lat else None,
        "max_ms": round(lat[-1], 1) if lat else None,
    }


def bench_storm(bootstrap: str, db_url: str, work: Path, lines_n: int, seconds: float) -> dict[str, Any]:
    st = settings_for(bootstrap, db_url, work, "storm")
    prepare(st)
    topo = topology(st.topic_prefix, st.partitions)
    worker = WorkerProcess(st, work / "storm.log").start()
    try:
        # Joined once an empty group has no lag and the worker's log says it is ready.
        deadline = time.monotonic() + 90
        while "Ready" not in worker.log_tail(100_000) and time.monotonic() < deadline:
            time.sleep(0.2)
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        lines = Lines()
        start = time.monotonic()
        chunk = max(1, lines_n // int(seconds * 20))
        sent = 0
        max_lag = 0
        while sent < lines_n:
            n = min(chunk, lines_n - sent)
            for _ in range(n):
                rec = lines.xid("storm-node", 3, 48)
                producer.send(topo.kernel.name, key=rec.node.encode(), value=encode_node_record(rec))
            sent += n
            sleep = start + seconds * sent / lines_n - time.monotonic()
            if sleep > 0:
                time.sleep(sleep)
        producer.flush()
        producer.close()
        storm_s = time.monotonic() - start
        lag_zero_at = None
        while time.monotonic() - start < 60:
            lag = consumer_lag(bootstrap, st)
            max_lag = max(max_lag, lag)
            if lag == 0:
                lag_zero_at = time.monotonic() - start
                break
            time.sleep(0.2)
    finally:
        worker.terminate()
    store = Store(db_url)
    try:
        incidents = [i for i in store_reads.incidents(store) if i["node"] == "storm-node"]
    finally:
        store.dispose()
    return {
        "lines": lines_n, "produced_in_s": round(storm_s, 2), "incidents": len(incidents),
        "incident_count": incidents[0]["count"] if incidents else 0,
        "lag_zero_after_storm_start_s": round(lag_zero_at, 2) if lag_zero_at is not None else None,
        "lag_zero_within_30s": lag_zero_at is not None and lag_zero_at <= 30,
        "max_lag_messages_after_storm": max_lag,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="use this broker instead of starting one")
    ap.add_argument("--database-url", help="default: SQLite in a temporary directory")
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--background-rate", type=float, default=1000.0)
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--background-fault-share", type=float, default=0.1,
                    help="share of the background lines that are Xid faults (the rest: GPU lines that are not)")
    ap.add_argument("--storm", type=int, default=10_000)
    ap.add_argument("--storm-seconds", type=float, default=10.0)
    ap.add_argument("--only", choices=["throughput", "latency", "storm"], action="append")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="xidpipe-pipeline-bench-"))
    broker = None
    result: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        bootstrap = args.bootstrap
        if not bootstrap:
            from xidpipe.localinfra.kafka import LocalKafka

            broker = LocalKafka(num_partitions=2).start()
            bootstrap = broker.bootstrap
        db_url = args.database_url or f"sqlite:///{work / 'bench.db'}"
        result["database"] = db_url.split(":", 1)[0]
        only = set(args.only or ["throughput", "latency", "storm"])
        if "throughput" in only:
            result["throughput"] = bench_throughput(bootstrap, db_url, work, args.events)
        if "latency" in only:
            result["latency"] = bench_latency(bootstrap, db_url, work, args.background_rate, args.latency_seconds,
                                              args.background_fault_share)
        if "storm" in only:
            result["storm"] = bench_storm(bootstrap, db_url, work, args.storm, args.storm_seconds)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
