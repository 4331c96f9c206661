"""The cordon path never waits on a ticket: with a Jira that answers after 5 s, the responder (real
Kafka, PostgreSQL and kube-apiserver) still cordons the next node within about a second."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from kafka import KafkaProducer
from kubernetes import client
from pydantic import SecretStr
from sqlalchemy.orm import Session

from history.tables import Incident
from models.topics import topology
from respond.responder import build_responder, run_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from service.metrics import counted
from streams.settings import WorkerSettings
from streams.store import Store
from streams.worker import prepare
from tests.fakes.jira.server import FakeJira
from tests.kube import unique
from tests.respond.cordon.conftest import ExecutorFactory, NodeFactory

T = datetime(2026, 11, 30, 8, tzinfo=UTC)
TOKEN = "jira-api-token-Qx81mZ0aLp"


def incident(incident_id: str, node: str) -> Incident:
    return Incident(
        incident_id=incident_id, fingerprint=f"v2:{uuid.uuid4().hex[:16]}", node=node, gpu="0000:63:00.0",
        family="gpu_lost", status="open", category="hardware", reason="GPU fell off the bus", count=1, first_seen=T,
        last_seen=T, opened_at=T, updated_at=T, resolved_at=None, previous_incident_id=None, gpu_uuid="GPU-1",
        serial="165", pci="0000:63:00.0", codes=["Xid 79"], pods=[], processes=[], workloads=[],
        immediate_action="RESTART_BM", investigatory_action=None, description=None, cordon_requested=False, version=1,
    )


def action(kind: str, incident_id: str, operation: str) -> bytes:
    return json.dumps({"kind": kind, "operation": operation, "incident_id": incident_id, "node": "n", "gpu": "g",
                       "reason": "test", "idempotency_key": f"{incident_id}:{kind}:{operation}"}).encode()


def test_a_slow_jira_never_delays_the_next_cordon(
    kafka_bootstrap: str, postgres_database: str, admin_core: client.CoreV1Api, make_node: NodeFactory,
    make_executor: ExecutorFactory,
) -> None:
    pool = unique("pool")
    first_node, second_node = make_node(pool=pool), make_node(pool=unique("pool"))
    prefix = f"t{uuid.uuid4().hex[:6]}."
    prepare(WorkerSettings(bootstrap_servers=kafka_bootstrap, database_url=postgres_database, topic_prefix=prefix,
                           partitions=1))
    a, b = f"inc-a-{prefix}", f"inc-b-{prefix}"
    store = Store(postgres_database)
    with Session(store.engine) as s:
        s.add_all([incident(a, first_node), incident(b, second_node)])
        s.commit()
    store.dispose()

    jira = FakeJira(token=TOKEN).start()
    jira.inject("*", r"/rest/api/\d/.*", kind="slow", delay=5.0, times=1000)  # every Jira call takes 5 s
    settings = RespondSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, database_url=postgres_database,
                               group_id=f"g-{prefix}")
    sinks = build_sinks(SinkSettings(jira_url=jira.url, jira_user=jira.user, jira_api_token=SecretStr(TOKEN),
                                     jira_timeout_s=30, group_wait_s=0), postgres_database)
    responder = build_responder(settings, make_executor(), sinks)
    topic = topology(prefix, 1).actions.name
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)

    def send(*values: bytes) -> None:
        for value in values:
            producer.send(topic, key=b"n", value=value)
        producer.flush()

    def cordoned(node: str) -> bool:
        return bool(admin_core.read_node(node).spec.unschedulable)

    def ticket_handled() -> bool:
        """The ticket sink finished a handling (done, queued or failed): its metric counts each."""
        return counted(responder.metrics.tickets) > 0

    async def run() -> dict[str, Any]:
        stop = asyncio.Event()
        task = asyncio.create_task(run_responder(settings, responder, stop))
        loop = asyncio.get_running_loop()
        try:
            send(action("ticket", a, "create"), action("cordon_candidate", a, "cordon"))
            deadline = loop.time() + 30
            while not await asyncio.to_thread(cordoned, first_node) and loop.time() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # the ticket lane is now inside a 5-second Jira call
            jira_busy = bool(jira.calls()) and not ticket_handled()
            started = time.monotonic()
            await asyncio.to_thread(send, action("cordon_candidate", b, "cordon"))
            while not await asyncio.to_thread(cordoned, second_node) and loop.time() < deadline:
                await asyncio.sleep(0.05)
            took = time.monotonic() - started
            ticket_done_before = ticket_handled()
            return {"jira_busy": jira_busy, "took": took, "ticket_done_before": ticket_done_before}
        finally:
            await asyncio.to_thread(jira.stop)  # the slow calls end now: the ticket waits in its queue
            stop.set()
            await task

    try:
        got = asyncio.run(run())
    finally:
        producer.close()
    assert got["jira_busy"], "the ticket should have been waiting on Jira when the second fault came"
    assert cordoned(second_node)
    assert got["took"] < 1.5, f"the second cordon took {got['took']:.2f} s behind a slow Jira"
    assert not got["ticket_done_before"]
