"""Act on the stream's action requests: cordon through the cordon lane (`respond.cordon_lane`: the
one cordon decision, retries and breaker holds), tickets and chat through the sinks, each from the
incident's current state in SQL.

Delivery is at-least-once: a message's offset is committed after it was handled, and every effect
is idempotent (the executor checks the node, the sinks check their own records). A message that
cannot be handled goes to the actions dead-letter topic (`models.dead_letter`: the reason and the
original bytes), and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.migrate import upgrade
from history.tables import Incident
from models.cordon_retry import RetryBackoff
from models.dead_letter import DeadLetter
from models.node_records import dead_letter_topic
from models.topics import topology
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon_lane import CordonLane, CordonOffer
from respond.dossier_builder import action_items, build_dossier
from respond.lifecycle import cordoned, record_lifecycle_step
from respond.observe import ResponderEndpoint, observe_request
from respond.quarantine.reconcile import QuarantineReconciler
from respond.quarantine.release import RuleReleaser
from respond.remediation.loop import Remediator
from respond.remediation.notify import TransitionNotifier
from respond.remediation.runtime import build_remediator
from respond.settings import RespondSettings
from respond.sinks.build import Sinks
from respond.sinks.model import IncidentNotice
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)


@dataclass(slots=True)
class HandlingResult:
    """How one action request was handled: its kind, incident, result and detail (for its log line)."""

    kind: str
    incident_id: str | None
    result: str
    detail: str = ""


Item = tuple[Any, Any, dict[str, Any] | None, str]  # (partition, message, its JSON object or None, why not)


def _kafka_security(settings: RespondSettings) -> dict[str, Any]:
    """aiokafka's TLS and SASL options; the TLS context trusts `ssl_cafile` (and presents the client
    certificate for mutual TLS)."""
    context = None
    if settings.uses_tls:
        from aiokafka.helpers import create_ssl_context

        context = create_ssl_context(
            cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None,
            certfile=str(settings.ssl_certfile) if settings.ssl_certfile else None,
            keyfile=str(settings.ssl_keyfile) if settings.ssl_keyfile else None,
        )
    return settings.aiokafka_options(context)


def completed_topic(settings: RespondSettings) -> str:
    return topology(settings.topic_prefix, 1).completed.name


@dataclass(slots=True)
class Responder:
    engine: sa.Engine
    executor: CordonExecutor
    sinks: Sinks
    cluster: str = "default"
    # The cluster the dossiers' cluster-side evidence is read from (None: no cluster configured).
    cluster_api: Any = None
    # Executed cluster actions with their outcome, to publish on the actions-completed topic.
    completed: list[dict[str, Any]] = field(default_factory=list)
    retry: RetryBackoff = field(default_factory=RetryBackoff)
    # Incidents whose ticket should show a cordon action: refreshed in the ticket lane, never the cordon's.
    ticket_refresh: list[str] = field(default_factory=list)
    metrics: ResponderMetrics = field(default_factory=ResponderMetrics)
    # The remediation loops after the cordon (`respond.remediation`), when the policy turns them on.
    remediator: Remediator | None = None
    notifier: TransitionNotifier | None = None
    cordons: CordonLane = field(init=False)
    quarantines: QuarantineReconciler = field(init=False)

    def __post_init__(self) -> None:
        self.cordons = CordonLane(self.engine, self.executor, backoff=self.retry, after=self._after_cordon,
                                  metrics=self.metrics)
        self.quarantines = QuarantineReconciler(self.engine, self.executor)
        if self.sinks is not None:
            self.sinks.use_metrics(self.metrics)

    def _notice(self, incident_id: str) -> IncidentNotice | None:
        with Session(self.engine) as s:
            row = s.get(Incident, incident_id)
            if row is None:
                return None
            actions = action_items(self.executor.store.recent(500), incident_id)
            dossier = build_dossier(s, row, actions, cluster=self.cluster)
            meta: dict[str, str] = {}
            namespaces: dict[str, dict[str, str]] = {}  # each affected workload's namespace: its team's channel
            if self.cluster_api is not None and row.component != "fleet":  # a fleet incident's node is the cluster
                from respond.cluster_evidence import capture, namespace_meta

                a = dossier.attribution
                keys = self.sinks.owner_keys if self.sinks is not None else ()
                items, owner = capture(self.cluster_api, row.node, a.namespace, a.pod, a.container, keys)
                dossier.evidence.extend(items)
                if owner and not a.owner:
                    a.owner = owner
                if a.namespace:
                    meta = namespace_meta(self.cluster_api, a.namespace)
                for ns in dict.fromkeys(w.namespace for w in dossier.affected if w.namespace):
                    namespaces[ns] = meta if ns == a.namespace else namespace_meta(self.cluster_api, ns)
            namespace = dossier.attribution.namespace
            labels = {"node": row.node, "family": row.family, "category": row.category}
            if namespace:
                labels["namespace"] = namespace
            return IncidentNotice(dossier=dossier, previous_incident_id=row.previous_incident_id, labels=labels,
                                  namespace_meta=meta, namespaces=namespaces)

    async def handle(self, message: dict[str, Any]) -> HandlingResult:
        kind = str(message.get("kind", ""))
        incident_id = message.get("incident_id")
        if not isinstance(incident_id, str) or kind not in ("cordon_candidate", "ticket", "notification"):
            raise ValueError(f"not an action request: kind={kind!r} incident_id={incident_id!r}")
        if kind == "cordon_candidate":
            (done,) = await self.handle_cordons([message])
            if isinstance(done, Exception):
                raise done
            return done
        else:
            notice = await asyncio.to_thread(self._notice, incident_id)
            if notice is None:
                raise LookupError(f"incident {incident_id} is not in the database")
            if kind == "ticket":
                tickets = await self.sinks.tickets.submit_async(notice)
                await asyncio.to_thread(self.record_ticketed, incident_id)
                outcome = HandlingResult(kind, incident_id, *_told(
                    [(t.sink, f"{t.status} {t.action or ''} {t.key or ''}".strip(), t.error or t.reason)
                     for t in tickets]))
            else:
                chats = await self.sinks.chat.submit_async(notice)
                pages = await self.sinks.pages.submit_async(notice)
                outcome = HandlingResult(kind, incident_id, *_told(
                    [(c.sink, f"{c.action} {c.channel or ''}".strip(), c.error or c.reason) for c in chats]
                    + [(f"{p.sink} pages", f"{p.action} {' '.join(p.events)}".strip(), p.error or p.reason)
                       for p in pages]))
        log.info("%s for %s: %s", kind, incident_id, outcome.result,
                 extra={"incident": incident_id, "action": kind, "detail": outcome.detail})
        return outcome

    async def handle_cordons(self, messages: Sequence[dict[str, Any]]) -> list[HandlingResult | Exception]:
        """Cordon candidates, in order, through the cordon lane: every one decided before any is
        completed (`CordonLane.offer_many`). Per message, its result or why it cannot be handled
        (ValueError: not a cordon candidate; LookupError: its incident is not in the database)."""
        out: list[HandlingResult | Exception | None] = [None] * len(messages)
        wanted: list[tuple[int, str, str | None]] = []
        for i, message in enumerate(messages):
            incident_id = message.get("incident_id")
            if message.get("kind") != "cordon_candidate" or not isinstance(incident_id, str):
                out[i] = ValueError(f"not a cordon request: kind={message.get('kind')!r} incident_id={incident_id!r}")
            else:
                wanted.append((i, incident_id, message.get("idempotency_key")))
        offers = await self.cordons.offer_many([(incident_id, key) for _, incident_id, key in wanted])
        for (i, incident_id, _), offer in zip(wanted, offers, strict=True):
            if isinstance(offer, LookupError):
                out[i] = offer
                continue
            r = offer.result
            what = "skipped" if r is None else f"{r.outcome}{' (dry run)' if r.dry_run else ''}"
            why = offer.followup.reason if r is None else r.reason
            done = HandlingResult("cordon_candidate", incident_id, what, why)
            log.info("%s for %s: %s", done.kind, incident_id, done.result,
                     extra={"incident": incident_id, "action": done.kind, "detail": done.detail})
            out[i] = done
        return [o for o in out if o is not None]

    async def _after_cordon(self, offer: CordonOffer) -> None:
        """Record what a cordon offer did (the completed topic, the `mitigated` step) and ask the ticket
        lane to refresh the incident's ticket when it tried or made a cordon."""
        result = offer.result
        if result is None:
            self.metrics.cordons.labels("skipped", "incident_ended").inc()
            return
        self.metrics.cordons.labels(result.outcome, result.decision or "none").inc()
        if result.fleet_alert is not None and not result.dry_run:
            self.metrics.breaker_trips.inc()
        self.completed.append({"schema_version": 1, "request": offer.request_key, **result.model_dump(mode="json")})
        if cordoned(result):
            q = result.quarantine
            what = (f"GPU {q.get('gpu')} of node {result.node} quarantined (rule {q.get('rule')})"
                    if result.action == "quarantine" else f"node {result.node} cordoned")
            await asyncio.to_thread(record_lifecycle_step, self.engine, offer.incident_id, "mitigated",
                                    f"{what}: {result.reason}")
        tried = result.action in ("cordon", "quarantine") and result.outcome in ("done", "dry_run", "blocked",
                                                                                 "failed")
        if tried and offer.incident_id not in self.ticket_refresh:
            self.ticket_refresh.append(offer.incident_id)

    def take_ticket_refreshes(self) -> list[str]:
        taken, self.ticket_refresh = self.ticket_refresh, []
        return taken

    async def refresh_ticket(self, incident_id: str) -> None:
        """Offer the ticket sink and the page sinks the incident's dossier again (its actions changed: a
        cordon step to page); the tracker and the paging decision decide."""
        notice = await asyncio.to_thread(self._notice, incident_id)
        if notice is not None:
            await self.sinks.pages.submit_async(notice)
            await self.sinks.tickets.submit_async(notice)
            await asyncio.to_thread(self.record_ticketed, incident_id)

    def record_ticketed(self, incident_id: str) -> bool:
        """The incident's lifecycle step `ticketed`, once the ticket map holds its ticket."""
        row = self.sinks.tickets.ticket(incident_id)
        if row is None:
            return False
        return record_lifecycle_step(self.engine, incident_id, "ticketed", f"ticket {row.ticket_key} ({row.tracker})")

    async def drain_tickets(self, stop: asyncio.Event, interval_s: float = 10.0) -> None:
        """The ticket sink's retry loop (tickets left pending while the tracker was unavailable), recording
        `ticketed` for the incidents whose ticket it created."""
        while not stop.is_set():
            try:
                for done in await self.sinks.tickets.drain_async():
                    if done.key:
                        await asyncio.to_thread(self.record_ticketed, done.incident_id)
            except Exception:
                log.exception("ticket drain failed; retrying in %.0f s", interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)


def _told(parts: list[tuple[str, str, str]]) -> tuple[str, str]:
    """The result and detail of a request from its sinks' (sink, result, detail): as they are for one
    sink, each after its sink's name for several."""
    if len(parts) == 1:
        return parts[0][1], parts[0][2]
    return "; ".join(f"{s}: {r}" for s, r, _ in parts), "; ".join(f"{s}: {d}" for s, _, d in parts)


@dataclass(slots=True)
class _Batch:
    """A fetch's work after its cordons, run in the background: the ticket refreshes its cordons asked
    for (those not yet run) and its other requests, in order; the offsets committed once all of it
    was handled."""

    offsets: dict[Any, Any]
    refresh: list[str]
    task: asyncio.Task[None] | None = None


async def run_responder(settings: RespondSettings, responder: Responder, stop: asyncio.Event,
                        ready: asyncio.Event | None = None) -> None:
    """Consume the actions topic until `stop` is set.

    Cordons are handled as soon as they are fetched (the latest offer per incident of a fetch): new
    work must stop landing on a failing GPU within a second. Tickets, chat messages and the ticket
    refreshes that cordons ask for are handled by one background chain, in order, so a slow Jira never
    delays a cordon. Pending cordons (retries, breaker holds) are offered again by a task of their
    own. A batch's offsets are committed once everything in it was handled (at-least-once; every
    effect is idempotent). A batch that fails stops the responder (raised) before its offsets are
    committed.

    The shutdown (`stop` set, or the loop's failure) never raises: it stops fetching, gives the work in
    flight `settings.shutdown_grace_s` to finish, cancels the rest, commits the batches that completed,
    in order up to the first that did not (its requests and every later batch's are delivered again to
    the group), keeps the ticket refreshes that did not run in `responder.ticket_refresh` (for this
    process's next run), and stops the clients (`_shut_down`).
    """
    consumer, producer = await _start_clients(settings)
    endpoint = ResponderEndpoint(settings.metrics_host, settings.metrics_port, responder.metrics, responder.engine,
                                 consumer).start()
    sinks = responder.sinks
    bg = [asyncio.create_task(responder.drain_tickets(stop, sinks.ticket_drain_interval_s)),
          asyncio.create_task(sinks.chat.run(stop, sinks.chat_flush_interval_s)),
          asyncio.create_task(sinks.pages.run(stop, sinks.page_drain_interval_s)),
          asyncio.create_task(responder.cordons.run(stop, settings.cordon_pending_interval_s))]
    gpu_watch = _start_gpu_watch(settings, responder, producer, stop, bg)
    if isinstance(responder.executor.nodes, KubeNodes):  # the pool counts listed before the first burst, not in it
        await asyncio.to_thread(responder.executor.nodes.start_watch, responder.executor.policy.scope.pool_label)
    if isinstance(responder.executor.nodes, RuleReleaser):  # a cluster whose DRA devices xidpipe quarantines
        bg.append(asyncio.create_task(responder.quarantines.run(stop, settings.quarantine_reconcile_interval_s)))
    if responder.remediator is not None:
        bg.append(asyncio.create_task(run_remediation(responder.remediator, stop, settings.remediation_interval_s)))
    if responder.notifier is not None:
        bg.append(asyncio.create_task(responder.notifier.run(stop, settings.remediation_interval_s)))

    async def handle_one(tp: Any, msg: Any, body: dict[str, Any] | None, why: str) -> None:
        observe_request(responder.metrics, msg, body)
        try:
            if body is None:
                raise ValueError(why)
            await responder.handle(body)
        except (ValueError, LookupError, TypeError) as exc:
            await dead_letter(tp, msg, body, exc)

    async def handle_cordons(items: list[Item]) -> None:
        """The fetch's cordon candidates: all decided before any is completed (`Responder.handle_cordons`)."""
        for _, msg, body, _ in items:
            observe_request(responder.metrics, msg, body)
        results = await responder.handle_cordons([body or {} for _, _, body, _ in items])
        for (tp, msg, body, _), result in zip(items, results, strict=True):
            if isinstance(result, Exception):
                await dead_letter(tp, msg, body, result)

    async def dead_letter(tp: Any, msg: Any, body: dict[str, Any] | None, exc: Exception) -> None:
        dead = DeadLetter(_dead_reason(body, exc), str(exc), tp.topic, tp.partition, msg.offset, msg.key,
                          msg.value, datetime.now(UTC))
        responder.metrics.dead_letters.inc()
        await producer.send_and_wait(dead_letter_topic(tp.topic), dead.to_json(), key=msg.key,
                                     headers=dead.headers())
        log.error("action request to dead-letter topic (%s): %s", dead.reason, exc,
                  extra={"topic": tp.topic, "partition": tp.partition, "offset": msg.offset})

    async def handle_later(batch: _Batch, items: list[Item], after: asyncio.Task[None] | None) -> None:
        if after is not None:
            await after  # keep the order of tickets and messages across batches
        while batch.refresh:
            incident_id = batch.refresh[0]
            try:
                await responder.refresh_ticket(incident_id)
            except Exception:
                if stop.is_set():
                    raise  # stopping: the shutdown hands it back (kept for the next run, the batch uncommitted)
                # the tracker's own queue retries; the next cordon action asks again
                log.exception("ticket refresh after a cordon failed", extra={"incident": incident_id})
            batch.refresh.pop(0)
        for item in items:
            await handle_one(*item)

    batches: list[_Batch] = []
    if ready is not None:
        ready.set()
    try:
        while not stop.is_set():
            endpoint.beat()
            now, later, offsets = _sort_batch(await consumer.getmany(timeout_ms=100, max_records=100))
            if now:
                await handle_cordons(now)
            await _publish_completed(producer, completed_topic(settings), responder)
            refresh = responder.take_ticket_refreshes()
            if offsets or refresh:
                batch = _Batch(offsets, refresh)
                batch.task = asyncio.create_task(handle_later(batch, later, batches[-1].task if batches else None))
                batches.append(batch)
            while batches and _done(batches[0]):
                _task(batches[0]).result()  # a failure stops the responder before its offsets are committed
                if batches[0].offsets:
                    await consumer.commit(batches[0].offsets)
                batches.pop(0)
    finally:
        stop.set()
        await _shut_down(settings, responder, (consumer, producer, endpoint), batches, bg, gpu_watch)


def _task(batch: _Batch) -> asyncio.Task[None]:
    assert batch.task is not None
    return batch.task


def _done(batch: _Batch) -> bool:
    return _task(batch).done()


def _failed(task: asyncio.Task[None]) -> BaseException | None:
    """Why a finished task did not complete (cancelled, or its exception), None when it did."""
    return asyncio.CancelledError() if task.cancelled() else task.exception()


async def _shut_down(settings: RespondSettings, responder: Responder, clients: tuple[Any, Any, Any],
                     batches: list[_Batch], bg: list[asyncio.Task[None]], gpu_watch: Any = None) -> None:
    """The orderly end of `run_responder`, after `stop` was set: never raises (each failure is logged)."""
    consumer, producer, endpoint = clients
    if gpu_watch is not None:  # its forwarding task (in `bg`) ends with `stop`; the watch's threads end here
        try:
            await asyncio.to_thread(gpu_watch.stop)
        except Exception:
            log.exception("shutdown: could not stop the GPU watch")
    work = [_task(b) for b in batches] + bg
    if work:
        _, unfinished = await asyncio.wait(work, timeout=settings.shutdown_grace_s)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
        if unfinished:
            log.warning("shutdown: %d task(s) still running after %.1f s: cancelled", len(unfinished),
                        settings.shutdown_grace_s)
    for task in bg:
        if (why := _failed(task)) is not None and not isinstance(why, asyncio.CancelledError):
            log.error("shutdown: a background loop had failed", exc_info=why)
    await _commit_completed(consumer, batches)
    left = [i for b in batches for i in b.refresh if i not in responder.ticket_refresh]
    if left:
        responder.ticket_refresh[:0] = list(dict.fromkeys(left))
        log.warning("shutdown: ticket refreshes not run, kept for the next run: %s", ", ".join(left))
    steps: list[tuple[str, Callable[[], Awaitable[Any] | None]]] = [
        ("publish the completed actions", lambda: _publish_completed(producer, completed_topic(settings), responder)),
        ("stop the consumer", consumer.stop), ("stop the producer", producer.stop),
        ("stop the endpoint", endpoint.stop)]
    for what, step in steps:
        try:
            result = step()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("shutdown: could not %s", what)


async def _commit_completed(consumer: Any, batches: list[_Batch]) -> None:
    """Commit the batches whose work completed, in order, up to the first that did not: it and every
    later batch are delivered again to the group (their offsets are not committed)."""
    for n, batch in enumerate(batches):
        why = _failed(_task(batch))
        if why is None and batch.offsets:
            try:
                await consumer.commit(batch.offsets)
            except Exception as exc:
                why = exc
        if why is not None:
            cancelled = isinstance(why, asyncio.CancelledError)
            log.warning("shutdown: %d batch(es) handed back for redelivery, their offsets not committed: %s",
                        len(batches) - n, "cancelled" if cancelled else f"{type(why).__name__}: {why}",
                        exc_info=None if cancelled else why)
            return


def _start_gpu_watch(settings: RespondSettings, responder: Responder, producer: Any, stop: asyncio.Event,
                     bg: list[asyncio.Task[None]]) -> Any:
    """The watch of the GPU nodes (`respond.gpu_watch`), its views forwarded to the kube topic by a task
    of `bg`; None without a cluster or with the watch off."""
    if responder.cluster_api is None or not settings.gpu_watch:
        return None
    import queue

    from respond.gpu_watch.forward import forward
    from respond.gpu_watch.watch import build_gpu_watch

    views: queue.SimpleQueue[Any] = queue.SimpleQueue()
    watch = build_gpu_watch(responder.cluster_api, views.put, settings).start()
    bg.append(asyncio.create_task(forward(views, producer, topology(settings.topic_prefix, 1).kube.name, stop)))
    return watch


async def run_remediation(remediator: Remediator, stop: asyncio.Event, interval_s: float) -> None:
    """The remediator's passes (`Remediator.tick`, in a thread: it calls the cluster) until `stop` is set."""
    while not stop.is_set():
        try:
            await asyncio.to_thread(remediator.tick)
        except Exception:
            log.exception("remediation pass failed; retrying in %.1f s", interval_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)


async def _start_clients(settings: RespondSettings) -> tuple[Any, Any]:
    """The actions topic's consumer (manual commits) and the producer of dead letters and completions."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    security = _kafka_security(settings)
    consumer = AIOKafkaConsumer(topology(settings.topic_prefix, 1).actions.name,
                                bootstrap_servers=settings.bootstrap_servers, group_id=settings.group_id,
                                enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                **security)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, acks="all", **security)
    await consumer.start()
    await producer.start()
    return consumer, producer


def _dead_reason(body: dict[str, Any] | None, exc: Exception) -> str:
    """The dead letter's reason: `undecodable` (not a JSON object), `unknown_incident` (the database does
    not have it), `invalid` (not an action request)."""
    if body is None:
        return "undecodable"
    return "unknown_incident" if isinstance(exc, LookupError) else "invalid"


def _sort_batch(batches: dict[Any, list[Any]]) -> tuple[list[Item], list[Item], dict[Any, Any]]:
    """The fetched messages as cordon requests (handled at once) and the rest (in order, in the
    background), and the offsets to commit once all of them were handled. Of several cordon offers
    for one incident in a fetch only the latest is handled: each is decided from the incident's
    current row, so the earlier ones would decide the same."""
    from aiokafka.structs import OffsetAndMetadata

    cordons: dict[Any, Item] = {}
    later: list[Item] = []
    offsets: dict[Any, OffsetAndMetadata] = {}
    for tp, messages in batches.items():
        for msg in messages:
            try:
                body = json.loads(msg.value or b"null")
                item: Item = (tp, msg, body if isinstance(body, dict) else None, "not a JSON object")
            except ValueError as exc:
                item = (tp, msg, None, f"not JSON: {exc}")
            if item[2] is not None and item[2].get("kind") == "cordon_candidate":
                incident = item[2].get("incident_id")
                key = incident if isinstance(incident, str) else (tp, msg.offset)
                cordons.pop(key, None)
                cordons[key] = item
            else:
                later.append(item)
            offsets[tp] = OffsetAndMetadata(msg.offset + 1, "")
    return list(cordons.values()), later, offsets


async def _publish_completed(producer: Any, topic: str, responder: Responder) -> None:
    """The executed cluster actions (recorded in SQL by the executor), for other consumers."""
    while responder.completed:
        done = responder.completed.pop(0)
        await producer.send_and_wait(topic, json.dumps(done).encode(), key=str(done.get("node", "")).encode())


def build_responder(settings: RespondSettings, executor: CordonExecutor, sinks: Sinks,
                    cluster_api: Any = None) -> Responder:
    """The responder over `settings.database_url`; that database, and the sinks' when it is another,
    are migrated to head first (the schema of every table comes from `history.migrate`), and the sink
    rows written before sinks had names go to the sink of their kind that wrote them (`Sinks.adopt`)."""
    engine = make_engine(settings.database)
    upgrade(engine)
    if sinks.store.engine.url != engine.url:
        upgrade(sinks.store.engine)
    sinks.adopt()
    responder = Responder(engine, executor, sinks, cluster=settings.cluster, cluster_api=cluster_api,
                          retry=RetryBackoff(initial_s=settings.cordon_retry_initial_s,
                                             max_s=settings.cordon_retry_max_s))
    responder.remediator = build_remediator(executor, service_account=settings.actions.remediation_service_account,
                                            metrics=responder.metrics)
    if responder.remediator is not None:
        responder.notifier = TransitionNotifier(responder.remediator.store, sinks)
    return responder
