"""Act on the stream's action requests: cordon through the guarded executor, tickets and chat
through the sinks, each from the incident's current state in SQL.

Delivery is at-least-once: a message's offset is committed after it was handled, and every effect
is idempotent (the executor checks the node, the sinks check their own records). A message that
cannot be decoded goes to the actions dead-letter topic with the reason, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.migrate import upgrade
from history.tables import Incident
from models.cordon import cordon_request_for
from models.incidents import IncidentState
from models.node_records import dead_letter_topic
from models.topics import topology
from respond.cordon.executor import CordonExecutor
from respond.dossier_builder import action_items, build_dossier
from respond.sinks.build import Sinks
from respond.sinks.model import IncidentNotice
from respond.steps import cordoned, record_step

log = logging.getLogger(__name__)


class RespondSettings(BaseSettings):
    """The responder's own settings (env prefix `XIDPIPE_RESPOND_`); the executor and the sinks read
    `XIDPIPE_ACTIONS_*` and `XIDPIPE_SINKS_*`."""

    model_config = SettingsConfigDict(env_prefix="XIDPIPE_RESPOND_", extra="ignore")

    bootstrap_servers: str = Field(default="127.0.0.1:9092", description="Kafka bootstrap servers")
    topic_prefix: str = Field(default="", description="the stream worker's topic prefix")
    database_url: str = Field(default="sqlite:///var/xidpipe.db", description="the stream worker's database")
    group_id: str = Field(default="xidpipe-responder", description="Kafka consumer group")
    cluster: str = Field(default="default", description="cluster name shown in dossiers")
    partitions: int = Field(default=8, ge=1, description="for the pipeline's topics `xidpipe respond` creates when "
                            "missing: the stream worker's partition count")
    replication_factor: int = Field(default=1, ge=1, description="for the topics `xidpipe respond` creates")


@dataclass(slots=True)
class HandlingResult:
    """How one action request was handled: its kind, incident, result and detail (for logs and the demo)."""

    kind: str
    incident_id: str | None
    result: str
    detail: str = ""


Item = tuple[Any, Any, dict[str, Any] | None, str]  # (partition, message, its JSON object or None, why not)




def completed_topic(settings: RespondSettings) -> str:
    return topology(settings.topic_prefix, 1).completed.name


@dataclass(slots=True)
class Responder:
    engine: sa.Engine
    executor: CordonExecutor
    sinks: Sinks
    cluster: str = "default"
    handled: list[HandlingResult] = field(default_factory=list)
    # The cluster the dossiers' cluster-side evidence is read from (None: no cluster configured).
    cluster_api: Any = None
    # Executed cluster actions with their outcome, to publish on the actions-completed topic.
    completed: list[dict[str, Any]] = field(default_factory=list)

    def _load(self, incident_id: str) -> Incident | None:
        with Session(self.engine) as s:
            row = s.get(Incident, incident_id)
            if row is not None:
                s.expunge(row)
            return row

    def _notice(self, incident_id: str) -> IncidentNotice | None:
        with Session(self.engine) as s:
            row = s.get(Incident, incident_id)
            if row is None:
                return None
            actions = action_items(self.executor.store.recent(500), incident_id)
            dossier = build_dossier(s, row, actions, cluster=self.cluster)
            meta: dict[str, str] = {}
            if self.cluster_api is not None:
                from respond.cluster_evidence import capture, namespace_meta

                a = dossier.attribution
                items, owner = capture(self.cluster_api, row.node, a.namespace, a.pod, a.container)
                dossier.evidence.extend(items)
                if owner and not a.owner:
                    a.owner = owner
                if a.namespace:
                    meta = namespace_meta(self.cluster_api, a.namespace)
            namespace = dossier.attribution.namespace
            labels = {"node": row.node, "family": row.family, "category": row.category}
            if namespace:
                labels["namespace"] = namespace
            return IncidentNotice(dossier=dossier, previous_incident_id=row.previous_incident_id, labels=labels,
                                  namespace_meta=meta)

    async def handle(self, message: dict[str, Any]) -> HandlingResult:
        kind = str(message.get("kind", ""))
        incident_id = message.get("incident_id")
        if not isinstance(incident_id, str) or kind not in ("cordon_candidate", "ticket", "notification"):
            raise ValueError(f"not an action request: kind={kind!r} incident_id={incident_id!r}")
        if kind == "cordon_candidate":
            row = await asyncio.to_thread(self._load, incident_id)
            if row is None:
                raise LookupError(f"incident {incident_id} is not in the database")
            state = IncidentState(
                incident_id=row.incident_id, fingerprint=row.fingerprint, node=row.node, gpu=row.gpu,
                family=row.family, status=row.status, count=row.count,  # type: ignore[arg-type]
                first_seen=row.first_seen, last_seen=row.last_seen, category=row.category, reason=row.reason,
                codes=tuple(str(c) for c in row.codes or ()),
            )
            result = await self.executor.handle_async(cordon_request_for(state))
            outcome = HandlingResult(kind, incident_id, f"{result.outcome}{' (dry run)' if result.dry_run else ''}",
                              result.reason)
            self.completed.append({"schema_version": 1, "request": message.get("idempotency_key"),
                                   **result.model_dump(mode="json")})
            if cordoned(result):
                await asyncio.to_thread(record_step, self.engine, incident_id, "mitigated",
                                        f"node {result.node} cordoned: {result.reason}")
            # The ticket's dossier lists the actions taken: let the tracker refresh it (it decides).
            notice = await asyncio.to_thread(self._notice, incident_id)
            if notice is not None:
                await self.sinks.tickets.submit_async(notice)
                await asyncio.to_thread(self.record_ticketed, incident_id)
        else:
            notice = await asyncio.to_thread(self._notice, incident_id)
            if notice is None:
                raise LookupError(f"incident {incident_id} is not in the database")
            if kind == "ticket":
                ticket = await self.sinks.tickets.submit_async(notice)
                await asyncio.to_thread(self.record_ticketed, incident_id)
                what = f"{ticket.status} {ticket.action or ''} {ticket.key or ''}".strip()
                outcome = HandlingResult(kind, incident_id, what, ticket.error or ticket.reason)
            else:
                chat = await self.sinks.chat.submit_async(notice)
                outcome = HandlingResult(kind, incident_id, f"{chat.action} {chat.channel or ''}".strip(),
                                  chat.error or chat.reason)
        self.handled.append(outcome)
        log.info("%s for %s: %s", kind, incident_id, outcome.result,
                 extra={"incident": incident_id, "action": kind, "detail": outcome.detail})
        return outcome

    def record_ticketed(self, incident_id: str) -> bool:
        """The incident's lifecycle step `ticketed`, once the ticket map holds its ticket."""
        row = self.sinks.store.ticket(incident_id)
        if row is None:
            return False
        return record_step(self.engine, incident_id, "ticketed", f"ticket {row.ticket_key} ({row.tracker})")

    async def drain_tickets(self, stop: asyncio.Event, interval_s: float = 10.0) -> None:
        """The ticket sink's retry loop (tickets left pending while the tracker was unavailable), recording
        `ticketed` for the incidents whose ticket it created."""
        while not stop.is_set():
            try:
                for done in await asyncio.to_thread(self.sinks.tickets.drain):
                    if done.key:
                        await asyncio.to_thread(self.record_ticketed, done.incident_id)
            except Exception:
                log.exception("ticket drain failed; retrying in %.0f s", interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


async def run_responder(settings: RespondSettings, responder: Responder, stop: asyncio.Event,
                        ready: asyncio.Event | None = None) -> None:
    """Consume the actions topic until `stop` is set.

    Cordons are handled as soon as they are fetched: new work must stop landing on a failing GPU
    within a second. Tickets and chat messages are handled by one background task, in order, so a
    slow Jira never delays a cordon. A batch's offsets are committed once everything in it was
    handled (at-least-once; every effect is idempotent).
    """
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import OffsetAndMetadata

    topic = topology(settings.topic_prefix, 1).actions.name
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.bootstrap_servers, group_id=settings.group_id,
                                enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all")
    await consumer.start()
    await producer.start()
    sinks = responder.sinks
    bg = [asyncio.create_task(responder.drain_tickets(stop, sinks.ticket_drain_interval_s)),
          asyncio.create_task(sinks.chat.run(stop, sinks.chat_flush_interval_s))]

    async def handle_one(tp: Any, msg: Any, body: dict[str, Any] | None, why: str) -> None:
        try:
            if body is None:
                raise ValueError(why)
            await responder.handle(body)
        except (ValueError, LookupError, TypeError) as exc:
            await producer.send_and_wait(dead_letter_topic(tp.topic), msg.value, key=msg.key, headers=[
                ("reason", str(exc).encode()), ("topic", tp.topic.encode()),
                ("partition", str(tp.partition).encode()), ("offset", str(msg.offset).encode())])
            log.error("action request to dead-letter topic: %s", exc,
                      extra={"topic": tp.topic, "partition": tp.partition, "offset": msg.offset})

    async def handle_later(items: list[Item], after: asyncio.Task[None] | None) -> None:
        if after is not None:
            await after  # keep the order of tickets and messages across batches
        for item in items:
            await handle_one(*item)

    pending: list[tuple[dict[Any, OffsetAndMetadata], asyncio.Task[None]]] = []
    if ready is not None:
        ready.set()
    try:
        while not stop.is_set():
            now, later, offsets = _sort_batch(await consumer.getmany(timeout_ms=100, max_records=100))
            for item in now:
                await handle_one(*item)
            await _publish_completed(producer, completed_topic(settings), responder)
            if offsets:
                previous = pending[-1][1] if pending else None
                pending.append((offsets, asyncio.create_task(handle_later(later, previous))))
            while pending and pending[0][1].done():
                done_offsets, task = pending.pop(0)
                task.result()  # a failure stops the responder before its offsets are committed
                await consumer.commit(done_offsets)
    finally:
        stop.set()
        try:
            # Commit what was fully handled, in order; stop at the first batch that failed.
            for done_offsets, task in pending:
                await task
                await consumer.commit(done_offsets)
        finally:
            for t in bg:
                await t
            await consumer.stop()
            await producer.stop()


def _sort_batch(batches: dict[Any, list[Any]]) -> tuple[list[Item], list[Item], dict[Any, Any]]:
    """The fetched messages as cordon requests (handled at once) and the rest (in order, in the
    background), and the offsets to commit once all of them were handled."""
    from aiokafka.structs import OffsetAndMetadata

    now: list[Item] = []
    later: list[Item] = []
    offsets: dict[Any, OffsetAndMetadata] = {}
    for tp, messages in batches.items():
        for msg in messages:
            try:
                body = json.loads(msg.value or b"null")
                item: Item = (tp, msg, body if isinstance(body, dict) else None, "not a JSON object")
            except ValueError as exc:
                item = (tp, msg, None, f"not JSON: {exc}")
            is_cordon = item[2] is not None and item[2].get("kind") == "cordon_candidate"
            (now if is_cordon else later).append(item)
            offsets[tp] = OffsetAndMetadata(msg.offset + 1, "")
    return now, later, offsets


async def _publish_completed(producer: Any, topic: str, responder: Responder) -> None:
    """The executed cluster actions (recorded in SQL by the executor), for other consumers."""
    while responder.completed:
        done = responder.completed.pop(0)
        await producer.send_and_wait(topic, json.dumps(done).encode(), key=str(done.get("node", "")).encode())


def build_responder(settings: RespondSettings, executor: CordonExecutor, sinks: Sinks,
                    cluster_api: Any = None) -> Responder:
    """The responder over `settings.database_url`; that database, and the sinks' when it is another,
    are migrated to head first (the schema of every table comes from `history.migrate`)."""
    engine = make_engine(settings.database_url)
    upgrade(engine)
    if sinks.store.engine.url != engine.url:
        upgrade(sinks.store.engine)
    return Responder(engine, executor, sinks, cluster=settings.cluster, cluster_api=cluster_api)
