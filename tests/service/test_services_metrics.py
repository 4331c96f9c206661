"""Every long-running service as its own process on a broker of its own, the sample cluster's data
passed through them (as `xidpipe demo` sends it), then each one's `/metrics`, `/healthz` and `/readyz`
read over HTTP: the agents, the stream worker, the responder and `xidpipe serve`. The values are
checked against what the data implies and what the database holds."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from history.migrate import VERSION_TABLE
from history.tables import OutboxMessage
from models.event_time import boot_times
from models.topics import topology
from streams.runner import WorkerProcess, group_lag, produce, wait_caught_up
from streams.settings import WorkerSettings
from streams.worker import prepare
from tests.polling import poll
from xidpipe.demo import sample_dir, sample_state
from xidpipe.localinfra.kafka import LocalKafka, cache_dir, jars_complete

pytestmark = pytest.mark.kafka

READ_TOKEN = "metrics-test-read-token-0123456789"
TIMEOUT_S = 150.0

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(url: str, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as exc:
        return 0, str(exc)


def scrape(base: str) -> Samples:
    code, text = call(f"{base}/metrics")
    assert code == 200, text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def series(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, ls), v in samples.items():
        if n == name:
            key = dict(ls)[label]
            out[key] = out.get(key, 0.0) + v
    return out


def spawn(stack: ExitStack, args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_")}
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env={**clean, **(env or {})})

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()

    stack.callback(stop)
    return proc


@pytest.fixture
def broker() -> Iterator[str]:
    """A broker of its own: the agents publish to the fixed node topics, which no other test may fill."""
    if not jars_complete(cache_dir() / "lib"):
        reason = "Kafka jars missing: run `xidpipe dev kafka fetch`"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    with LocalKafka(num_partitions=2) as kafka:
        yield kafka.bootstrap


def start_agents(stack: ExitStack, bootstrap: str, tmp_path: Path) -> dict[str, tuple[str, subprocess.Popen[bytes]]]:
    """One agent per sample node, following its kernel log (as on a node), each with its endpoint."""
    boots = boot_times(sample_state())
    agents = {}
    for log in sorted(sample_dir().glob("*.log")):
        port = free_port()
        boot = ["--boot-time", boots[log.stem].isoformat()] if log.stem in boots else []
        proc = spawn(stack, [sys.executable, "-m", "xidpipe.cli", "agent", "--source", "file", "--log-file",
                             str(log), "--node", log.stem, "--bootstrap-servers", bootstrap, "--state-dir",
                             str(tmp_path / "agents" / log.stem), "--no-nvml", "--no-podresources", "--no-evidence",
                             "--metrics-port", str(port), *boot], tmp_path / f"agent-{log.stem}.log")
        agents[log.stem] = (f"http://127.0.0.1:{port}", proc)
    return agents


def check_agents(agents: dict[str, tuple[str, subprocess.Popen[bytes]]]) -> float:
    """The agents read their whole logs and Kafka took every record; returns the records acknowledged."""
    for node, (base, _) in agents.items():
        def published(base: str = base) -> bool:
            code, text = call(f"{base}/metrics")
            return code == 200 and "xidpipe_agent_kernel_lines_read_total" in text and \
                total(scrape(base), "xidpipe_agent_spool_pending") == 0 and \
                total(scrape(base), "xidpipe_agent_records_acked_total") > 0
        poll(f"agent {node} to publish its log", published, TIMEOUT_S, interval=0.3)
    acked = 0.0
    for node, (base, _) in agents.items():
        m = scrape(base)
        lines = sum(1 for _ in (sample_dir() / f"{node}.log").open())
        assert total(m, "xidpipe_agent_kernel_lines_read_total") == lines
        kept = total(m, "xidpipe_agent_prefilter_kept_total")
        assert kept > 0 and kept + total(m, "xidpipe_agent_prefilter_dropped_total") == lines
        assert total(m, "xidpipe_agent_kafka_connected") == 1 and total(m, "xidpipe_agent_spool_bytes") >= 0
        acked += total(m, "xidpipe_agent_records_acked_total")
        assert call(f"{base}/healthz")[0] == 200 and call(f"{base}/readyz")[0] == 200
    return acked


def check_worker(base: str, engine: sa.Engine, kernel_topic: str, acked: float) -> None:
    poll("the worker's lag to read 0 on every partition", lambda: (
        (lag := series(scrape(base), "xidpipe_worker_consumer_lag", "topic"))
        and kernel_topic in lag and sum(lag.values()) == 0), 30, interval=0.3)
    with engine.connect() as conn:
        by_class = {c or "unknown": n for c, n in conn.execute(sa.text(
            "SELECT catalog_category, count(*) FROM fault_events GROUP BY catalog_category"))}
        # Incidents opened, as the incidents topic told (one opened and merged within a batch is not).
        opened = [p["incident"] for (p,) in conn.execute(sa.select(OutboxMessage.payload).where(
            OutboxMessage.stream == "incidents")) if p["change"] == "opened"]
    w = scrape(base)
    assert {"hardware", "application"} <= set(by_class)  # what the sample cluster has
    assert series(w, "xidpipe_worker_fault_events_total", "class") == by_class
    assert total(w, "xidpipe_worker_xid_to_incident_seconds_count") == sum(by_class.values())
    assert total(w, "xidpipe_worker_xid_to_incident_seconds_sum") > 0
    assert total(w, "xidpipe_worker_incidents_opened_total") == len(opened) > 0
    assert series(w, "xidpipe_worker_incidents_opened_total", "component") == {
        c: sum(1 for i in opened if i["component"] == c) for c in {i["component"] for i in opened}}
    assert total(w, "xidpipe_worker_messages_consumed_total", topic=kernel_topic) >= acked + 1
    assert total(w, "xidpipe_worker_messages_consumed_total") >= acked + len(sample_state()) + 1
    assert series(w, "xidpipe_worker_dead_letters_total", "topic") == {kernel_topic: 1}
    assert total(w, "xidpipe_worker_batch_messages_count") > 0 and total(w, "xidpipe_worker_batch_seconds_sum") > 0
    assert call(f"{base}/healthz")[0] == 200 and call(f"{base}/readyz")[0] == 200


def check_responder(base: str, broker: str, group: str, responder: subprocess.Popen[bytes]) -> None:
    """Every action request handled: dry-run cordons, outbox tickets and messages."""
    actions = topology("", 1).actions.name
    poll("the responder to commit every action request", lambda: asyncio.run(
        group_lag(broker, group, [actions])) == 0 and responder.poll() is None, TIMEOUT_S, interval=0.3)
    r = poll("a chat message sent", lambda: (m := scrape(base)) and total(
        m, "xidpipe_responder_chat_deliveries_total", sink="outbox", action="send") > 0 and m, 30, interval=0.3)
    consumed = total(r, "xidpipe_responder_actions_consumed_total")
    assert total(r, "xidpipe_responder_actions_consumed_total", kind="cordon_candidate") > 0
    assert total(r, "xidpipe_responder_action_lag_seconds_count") == consumed > 0
    assert total(r, "xidpipe_responder_cordons_total", outcome="dry_run") > 0
    assert total(r, "xidpipe_responder_ticket_deliveries_total", sink="outbox", status="done") > 0
    assert total(r, "xidpipe_responder_breaker_tripped") == 0
    assert total(r, "xidpipe_responder_dead_letters_total") == 0
    assert call(f"{base}/healthz")[0] == 200 and call(f"{base}/readyz")[0] == 200


def check_web(stack: ExitStack, db_url: str, port: int, tmp_path: Path) -> str:
    """`xidpipe serve` counts requests by route and status, on its metrics port; returns its address."""
    tokens = tmp_path / "api-tokens"
    tokens.write_text(f"reader read {READ_TOKEN}\n")
    tokens.chmod(0o600)
    metrics_port = free_port()
    web = spawn(stack, [sys.executable, "-m", "xidpipe.cli", "serve", "--database-url", db_url, "--port",
                        str(port), "--tokens-file", str(tokens)], tmp_path / "serve.log",
                env={"XIDPIPE_WEB_METRICS_PORT": str(metrics_port)})
    base = f"http://127.0.0.1:{port}"
    poll("xidpipe serve", lambda: call(f"{base}/healthz")[0] == 200 or web.poll() is not None, 60, interval=0.3)
    code, body = call(f"{base}/api/v1/incidents?limit=100", READ_TOKEN)
    assert code == 200 and json.loads(body)["total"] > 0
    assert call(f"{base}/api/v1/incidents")[0] == 401
    assert call(f"{base}/metrics")[0] == 404  # not on the public port
    m = scrape(f"http://127.0.0.1:{metrics_port}")
    assert total(m, "xidpipe_web_requests_total", route="listIncidents", status="200") == 1
    assert total(m, "xidpipe_web_requests_total", route="listIncidents", status="401") == 1
    assert total(m, "xidpipe_web_request_seconds_count", route="listIncidents") == 2
    assert call(f"{base}/readyz")[0] == 200
    return base


def check_not_ready_on_another_schema(engine: sa.Engine, *bases: str) -> None:
    """A database at another schema: the services are not ready, say why, and stay live."""
    with engine.begin() as conn:
        head = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one()
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = 'gone'"))
    try:
        for base in bases:
            code, body = call(f"{base}/readyz")
            assert code == 503 and "gone" in json.loads(body)["checks"]["database"], (base, body)
            assert call(f"{base}/healthz")[0] == 200
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = :v"), {"v": head})
    for base in bases:
        assert call(f"{base}/readyz")[0] == 200


def test_every_service_serves_metrics_and_health_after_the_samples_passed(broker: str, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'xidpipe.db'}"
    run = uuid.uuid4().hex[:6]
    worker_port, responder_port, web_port = free_port(), free_port(), free_port()
    settings = WorkerSettings(bootstrap_servers=broker, database_url=db_url, app_id=f"metrics-{run}", partitions=2,
                              datadir=tmp_path / "faust", session_timeout_s=6.0, heartbeat_interval_s=1.0,
                              commit_interval_s=0.5, cluster="demo", metrics_port=worker_port)
    prepare(settings)
    topo = topology(settings.topic_prefix, settings.partitions)
    kernel_topic = next(t.name for t in topo.inputs if t.role == "kernel")
    with ExitStack() as stack:
        worker = WorkerProcess(settings, tmp_path / "worker.log").start()
        stack.callback(worker.kill)
        produce(broker, topo, sample_state())
        agents = start_agents(stack, broker, tmp_path)
        responder = spawn(stack, [sys.executable, "-m", "tests.service.responder_process", json.dumps({
            "bootstrap_servers": broker, "database_url": db_url, "topic_prefix": "", "group_id": f"respond-{run}",
            "metrics_port": responder_port, "outbox": str(tmp_path / "outbox")})], tmp_path / "responder.log")
        acked = check_agents(agents)
        # A message no decoder takes: one dead letter, by topic and reason.
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=broker)
        producer.send(kernel_topic, key=b"gpu-node-01", value=b"\xff not a record").get(30)
        producer.close()
        wait_caught_up(settings, TIMEOUT_S, worker)
        engine = sa.create_engine(db_url)
        stack.callback(engine.dispose)
        worker_base, responder_base = f"http://127.0.0.1:{worker_port}", f"http://127.0.0.1:{responder_port}"
        check_worker(worker_base, engine, kernel_topic, acked)
        check_responder(responder_base, broker, f"respond-{run}", responder)
        web_base = check_web(stack, db_url, web_port, tmp_path)
        check_not_ready_on_another_schema(engine, worker_base, responder_base, web_base)
