"""The responder against real Kafka and PostgreSQL: cordon decisions, tickets, chat, dead letters.

Action requests are produced to an actions topic of the test's own prefix; incidents are rows the
stream would have written. No cluster is configured, so cordons are dry-run decisions; Jira and
Slack are their file outboxes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer
from sqlalchemy.orm import Session

from history.tables import Incident
from models.dead_letter import DeadLetter
from models.topics import topology
from respond.cordon.runtime import build_executor
from respond.responder import Responder, build_responder, run_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from service.metrics import counted
from streams.settings import WorkerSettings
from streams.store import Store
from streams.worker import prepare
from tests.polling import poll_async

T = datetime(2026, 11, 25, 15, 26, 51, tzinfo=UTC)


def incident(incident_id: str, node: str, family: str, category: str, codes: list[str]) -> Incident:
    return Incident(
        incident_id=incident_id, fingerprint=f"v1:{uuid.uuid4().hex[:16]}", node=node, gpu="0000:63:00.0",
        family=family, status="open", category=category, reason=f"{family} on {node}", count=1, first_seen=T,
        last_seen=T, opened_at=T, updated_at=T, resolved_at=None, previous_incident_id=None,
        gpu_uuid="GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63", serial="1654923011263", pci="0000:63:00.0",
        codes=codes, pods=["team-llm/llm-pretrain-7-worker-3/trainer"], processes=[], workloads=[],
        immediate_action=None, investigatory_action=None, description=None, cordon_requested=True, version=1,
    )


def action(kind: str, incident_id: str, node: str, operation: str) -> bytes:
    return json.dumps({"kind": kind, "operation": operation, "incident_id": incident_id, "node": node,
                       "gpu": "0000:63:00.0", "reason": "test", "idempotency_key": f"{incident_id}:{kind}:{operation}"
                       }).encode()


async def respond(settings: RespondSettings, responder: Responder, requests: int, timeout: float = 60.0) -> None:
    """Run the responder until it consumed `requests` action requests (its metrics count each as it is
    taken up); stopping then still finishes the handling in hand."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_responder(settings, responder, stop))
    try:
        await poll_async(f"{requests} action requests consumed",
                         lambda: task.done() or counted(responder.metrics.actions) >= requests, timeout)
    finally:
        stop.set()
        await task


def test_actions_are_carried_out_once_and_bad_ones_dead_lettered(
    kafka_bootstrap: str, postgres_database: str, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}."
    prepare(WorkerSettings(bootstrap_servers=kafka_bootstrap, database_url=postgres_database, topic_prefix=prefix,
                           partitions=1))
    store = Store(postgres_database)
    with Session(store.engine) as s:
        s.add(incident("inc-lost", "gpu-node-03", "gpu_lost", "hardware", ["Xid 79"]))
        s.add(incident("inc-app", "gpu-node-01", "application", "application", ["Xid 13"]))
        s.commit()
    store.dispose()

    topic = topology(prefix, 1).actions.name
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for value in (
        action("cordon_candidate", "inc-lost", "gpu-node-03", "cordon"),
        action("ticket", "inc-lost", "gpu-node-03", "create"),
        action("notification", "inc-lost", "gpu-node-03", "opened"),
        action("ticket", "inc-lost", "gpu-node-03", "create"),  # redelivery
        b"{not json",
        action("ticket", "inc-missing", "gpu-node-09", "create"),
    ):
        producer.send(topic, key=b"gpu-node-03", value=value)
    producer.flush()
    producer.close()

    settings = RespondSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, database_url=postgres_database,
                               group_id=f"g-{prefix}")
    outbox = tmp_path / "outbox"
    executor = build_executor(settings.actions, database_url=postgres_database)
    sinks = build_sinks(SinkSettings(outbox_dir=outbox, group_wait_s=0), postgres_database)
    responder = build_responder(settings, executor, sinks)
    asyncio.run(respond(settings, responder, requests=6))

    # Observed through what the responder records: its metrics, the action log, the outboxes, the topics.
    consumed = {k: counted(responder.metrics.actions, kind=k) for k in ("cordon_candidate", "ticket", "notification",
                                                                         "undecodable")}
    assert consumed == {"cordon_candidate": 1, "ticket": 3, "notification": 1, "undecodable": 1}
    assert counted(responder.metrics.dead_letters) == 2
    messages = list((outbox / "slack").glob("*/*.json"))
    assert len(messages) == 1 and "gpu-node-03" in messages[0].read_text()
    cordons = [a for a in executor.store.recent(50) if a.action == "cordon" and a.incident_id == "inc-lost"]
    assert len(cordons) == 1 and cordons[0].dry_run
    tickets = list((outbox / "jira").glob("*/ticket.json"))
    assert len(tickets) == 1, "the redelivered ticket request opened a second ticket"
    assert "gpu-node-03" in (tickets[0].parent / "dossier.md").read_text()

    done = KafkaConsumer(f"{topic}.completed", bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                         consumer_timeout_ms=5000)
    completed = [json.loads(m.value) for m in done]
    done.close()
    assert [(c["action"], c["node"], c["incident_id"], c["dry_run"]) for c in completed] == [
        ("cordon", "gpu-node-03", "inc-lost", True)]
    assert completed[0]["request"] == "inc-lost:cordon_candidate:cordon" and completed[0]["reason"]

    dlq = KafkaConsumer(f"{topic}.dlq", bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                        consumer_timeout_ms=5000)
    dead = [(DeadLetter.from_json(m.value), m.key, dict(m.headers)) for m in dlq]
    dlq.close()
    # The stream's dead-letter format (models.dead_letter): the original bytes, the reason, where it was read.
    assert [d.value for d, _, _ in dead] == [b"{not json", action("ticket", "inc-missing", "gpu-node-09", "create")]
    assert [d.reason for d, _, _ in dead] == ["undecodable", "unknown_incident"]
    assert all(d.topic == topic and d.partition == 0 and key == b"gpu-node-03" for d, key, _ in dead)
    assert dead[0][0].offset < dead[1][0].offset and "not in the database" in dead[1][0].error
    assert all(h["xidpipe-dlq-topic"] == topic.encode() and h["xidpipe-dlq-reason"] == d.reason.encode()
               for d, _, h in dead)
