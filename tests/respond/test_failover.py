"""Two responder processes on one actions topic, elected through a Lease on the real kube-apiserver,
with PostgreSQL, Kafka and the Jira and Slack stand-ins.

A burst of action requests (a cordon, a ticket and a message per incident, more cordons than the
breaker allows per hour) is produced; the leader is killed with SIGKILL during it. The standby takes
over once the Lease has gone unrenewed for its duration; afterwards every cordon, ticket and message
happened exactly once and the breaker tripped at its cap. A SIGTERM releases the Lease instead, and
the standby takes over at its next read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kafka import KafkaProducer
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy.orm import Session

from history.action_tables import actions_table
from history.engine import make_engine
from history.tables import Incident
from models.ticket_policy import INCIDENT_LABEL_PREFIX
from models.topics import topology
from streams.settings import WorkerSettings
from streams.worker import prepare
from tests.fakes.jira.server import FakeJira
from tests.fakes.slack.server import FakeSlack
from tests.kube import unique
from tests.polling import poll
from tests.respond.test_responder import action, incident

REPO = Path(__file__).resolve().parents[2]
TIMINGS = {"lease_duration_s": 6.0, "renew_deadline_s": 4.0, "retry_period_s": 0.5}
JIRA_TOKEN, SLACK_TOKEN = "jira-api-token-Failover0001", "xoxb-3333-4444-FailoverToken"
CAP = 6  # the breaker's max_per_hour
INCIDENTS = 16


class Replicas:
    """Responder processes of one test, each with its log file; all stopped afterwards."""

    def __init__(self, base: dict[str, Any], tmp: Path) -> None:
        self.base, self.tmp = base, tmp
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, identity: str) -> subprocess.Popen[bytes]:
        cfg = self.tmp / f"{identity}.json"
        cfg.write_text(json.dumps({**self.base, "identity": identity}))
        log = (self.tmp / f"{identity}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "tests.respond.failover_child", str(cfg)], cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.procs[identity] = proc
        return proc

    def log(self, identity: str) -> str:
        return (self.tmp / f"{identity}.log").read_text(errors="replace")[-4000:]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def stand_ins() -> Iterator[tuple[FakeJira, FakeSlack]]:
    jira = FakeJira(token=JIRA_TOKEN).start()
    slack = FakeSlack(token=SLACK_TOKEN).start()
    yield jira, slack
    jira.stop()
    slack.stop()


@pytest.fixture
def setup(kafka_bootstrap: str, postgres_database: str, control_plane: Any, admin_core: client.CoreV1Api,
          stand_ins: tuple[FakeJira, FakeSlack], tmp_path: Path) -> Iterator[dict[str, Any]]:
    prefix = f"t{uuid.uuid4().hex[:6]}."
    prepare(WorkerSettings(bootstrap_servers=kafka_bootstrap, database_url=postgres_database, topic_prefix=prefix,
                           partitions=1))
    pool = unique("pool")
    nodes = [unique("gpu-node") for _ in range(INCIDENTS)]
    for name in nodes:
        admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
            name=name, labels={"nvidia.com/gpu.present": "true", "xidpipe.io/pool": pool})))
    engine = make_engine(postgres_database)
    with Session(engine) as s:
        for n, name in enumerate(nodes):
            s.add(incident(f"inc-{n:02d}", name, "gpu_lost", "hardware", ["Xid 79"]))
        s.commit()
    engine.dispose()
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"breaker:\n  max_pool_share: 1.0\n  min_nodes: 0\n  max_per_hour: {CAP}\n")
    jira, slack = stand_ins
    replicas = Replicas({
        "bootstrap": kafka_bootstrap, "prefix": prefix, "group": f"g-{prefix}", "database_url": postgres_database,
        "lease": unique("xidpipe-respond"), "timings": TIMINGS, "server": control_plane.server,
        "token": control_plane.token("admin"), "ca": str(control_plane.ca_file), "policy": str(policy),
        "jira_url": jira.url, "jira_user": jira.user, "jira_token": JIRA_TOKEN, "slack_url": f"{slack.url}/api/",
        "slack_token": SLACK_TOKEN}, tmp_path)
    try:
        yield {"prefix": prefix, "nodes": nodes, "replicas": replicas, "db": postgres_database, "jira": jira,
               "slack": slack, "lease": replicas.base["lease"]}
    finally:
        replicas.stop_all()
        for name in nodes:
            try:
                admin_core.delete_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def holder(admin_client: client.ApiClient, lease: str) -> str:
    try:
        spec = client.CoordinationV1Api(admin_client).read_namespaced_lease(lease, "default").spec
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return spec.holder_identity or ""


def burst(bootstrap: str, prefix: str, nodes: list[str]) -> None:
    topic = topology(prefix, 1).actions.name
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for n, node in enumerate(nodes):
        for kind, op in (("cordon_candidate", "cordon"), ("ticket", "create"), ("notification", "opened")):
            producer.send(topic, key=node.encode(), value=action(kind, f"inc-{n:02d}", node, op))
    producer.flush()
    producer.close()


def cordoned(core: client.CoreV1Api, nodes: list[str]) -> list[client.V1Node]:
    return [n for n in (core.read_node(name) for name in nodes) if n.spec.unschedulable]


def test_the_standby_takes_over_a_killed_leader_and_every_action_happens_once(
    setup: dict[str, Any], admin_client: client.ApiClient, admin_core: client.CoreV1Api, kafka_bootstrap: str
) -> None:
    replicas: Replicas = setup["replicas"]
    nodes, lease = setup["nodes"], setup["lease"]
    leader = replicas.start("responder-a")
    poll("responder-a to lead", lambda: holder(admin_client, lease) == "responder-a", 90)
    replicas.start("responder-b")
    poll("responder-b to stand by", lambda: "responder-b is a standby" in replicas.log("responder-b"), 90)
    assert holder(admin_client, lease) == "responder-a"

    burst(kafka_bootstrap, setup["prefix"], nodes)
    poll("the leader's first cordon", lambda: cordoned(admin_core, nodes), 90, interval=0.05)
    leader.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    leader.wait(10)
    at_kill = (len(cordoned(admin_core, nodes)), len(setup["jira"].issues))

    poll("responder-b to take over", lambda: holder(admin_client, lease) == "responder-b",
             TIMINGS["lease_duration_s"] * 3)
    takeover = time.monotonic() - killed
    print(f"\nfailover: lease taken over {takeover:.2f} s after SIGKILL (lease {TIMINGS['lease_duration_s']:g} s, "
          f"retry {TIMINGS['retry_period_s']:g} s); at the kill {at_kill[0]} cordons and {at_kill[1]} tickets done")
    # The standby judges expiry from the last renewal it saw: at most a retry period before the kill,
    # seen at most a retry period later, read again at most a retry period after the expiry.
    assert takeover <= TIMINGS["lease_duration_s"] + 3 * TIMINGS["retry_period_s"] + 1.0

    jira, slack = setup["jira"], setup["slack"]
    engine = make_engine(setup["db"])
    try:
        def settled() -> bool:
            with engine.connect() as conn:
                tickets = conn.execute(sa.text("select count(*) from tickets")).scalar_one()
            # every incident's ticket and the breaker's fleet incident's
            return tickets >= INCIDENTS + 1 and len(slack.roots("gpu-infra")) >= INCIDENTS
        poll("every ticket and message", settled, 120, interval=0.5)
        time.sleep(3)  # anything doubled would arrive now
        with engine.connect() as conn:
            rows = conn.execute(sa.select(actions_table.c.action, actions_table.c.outcome, actions_table.c.node,
                                          actions_table.c.decision)).all()
        with Session(engine) as s:
            fleet = s.scalars(sa.select(Incident).where(Incident.component == "fleet")).all()
    finally:
        engine.dispose()

    # Cordons: exactly the breaker's cap, each node once, each with one xidpipe taint.
    held = cordoned(admin_core, nodes)
    assert len(held) == CAP, f"{len(held)} nodes cordoned, cap {CAP}\n{replicas.log('responder-b')}"
    for node in held:
        ours = [t for t in node.spec.taints or [] if t.key.startswith("xidpipe.io/")]
        assert len(ours) == 1 and node.metadata.annotations.get("xidpipe.io/incident")
    done = Counter(r.node for r in rows if r.action == "cordon" and r.outcome == "done")
    assert sorted(done) == sorted(n.metadata.name for n in held) and set(done.values()) == {1}
    assert [r.action for r in rows].count("breaker_trip") == 1
    assert len(fleet) == 1

    # Tickets: one Jira issue per incident (and the breaker's fleet incident), never two.
    labels = Counter(label for issue in jira.issues.values() for label in issue.fields.get("labels", [])
                     if label.startswith(INCIDENT_LABEL_PREFIX))
    assert len(labels) == INCIDENTS + 1 and set(labels.values()) == {1}, labels
    # Messages: no message posted twice (each carries its idempotency key in its metadata).
    keys = Counter((m.metadata or {}).get("event_payload", {}).get("key") for m in slack.messages("gpu-infra"))
    assert keys and max(keys.values()) == 1, keys
    assert len(slack.roots("gpu-infra")) == INCIDENTS + 1


def test_a_clean_stop_releases_the_lease_and_the_standby_takes_over_at_once(
    setup: dict[str, Any], admin_client: client.ApiClient
) -> None:
    replicas: Replicas = setup["replicas"]
    lease = setup["lease"]
    leader = replicas.start("responder-a")
    poll("responder-a to lead", lambda: holder(admin_client, lease) == "responder-a", 90)
    replicas.start("responder-b")
    poll("responder-b to stand by", lambda: "responder-b is a standby" in replicas.log("responder-b"), 90)
    leader.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    poll("responder-b to take over", lambda: holder(admin_client, lease) == "responder-b", 30, interval=0.05)
    takeover = time.monotonic() - stopped
    assert leader.wait(30) == 0, replicas.log("responder-a")
    print(f"\nfailover: lease taken over {takeover:.2f} s after SIGTERM (released)")
    assert takeover < TIMINGS["lease_duration_s"], "the released Lease was not taken over before it expired"
    spec = client.CoordinationV1Api(admin_client).read_namespaced_lease(lease, "default").spec
    assert spec.lease_transitions == 1
