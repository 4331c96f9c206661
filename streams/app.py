"""The Faust application: node records in, incidents and action requests out.

One agent consumes the four input topics (co-partitioned by node) and hands the messages, in
batches that adapt to the load, to the intake (`streams.intake.Intake`, in a process of its own):
decode → parse and map to items (pure) → one store transaction → the outbox rows that transaction
wrote come back and are published. A message that cannot be decoded goes to its topic's
dead-letter twin with the reason and the original bytes; the stream keeps going.

Delivery is at least once. A batch is acknowledged (`stream.noack()`, then `stream.ack`) only after
its transaction committed, and the transaction drops records already handled, so a redelivered
batch changes nothing. A kernel line whose multi-line record is still open in its node's parser is
*held*: it, and every later message of its partition, is acknowledged only once that record is
stored (`streams.committer.Acks`), so the committed offset never passes it, nor stands inside a
stored record (`streams.items`). A worker that dies, stops or loses the partition leaves the
record's lines to whoever reads the partition next, who parses the whole record again; what a
worker kept of a partition it lost is dropped, and events of it that were fetched before the
rebalance are left alone. Faust's own wait for unacknowledged events at a rebalance or shutdown is
off (`stream_wait_empty=False`, as Faust documents for idempotent streams): held lines would hold it
for ever. The pipeline waits instead for what it was handed (`_settle`), then lets go. Messages to
publish are rows of the outbox, written in the same transaction and marked sent after Kafka
acknowledged them; a sweep resends any left unsent by a crash.

Retries live in one layer, here: the store says whether a failed transaction may be run again
(`streams.store.StoreRetry`), the worker retries it (`_process_marking`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import faust

from models.dead_letter import DeadLetter
from models.topics import Topology, topology
from streams.committer import Acks, Batches, current_events
from streams.faust_transport import use_fetch_wait
from streams.intake import IntakeResult, Message
from streams.intake_process import IntakeProcess
from streams.items import ParserBounds
from streams.observe import HEARTBEAT_S, WorkerObserver
from streams.outbox import Outgoing
from streams.settings import WorkerSettings
from streams.store import BatchResult, StoreRetry
from streams.topics import ssl_context

log = logging.getLogger(__name__)



def broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{h.strip()}" for h in bootstrap.split(",") if h.strip()]


def broker_credentials(settings: WorkerSettings) -> Any:
    """Faust's credentials for the TLS and SASL settings (`models.kafka_security`); None: PLAINTEXT."""
    context = ssl_context(settings)
    if settings.security_protocol.startswith("SASL_"):
        assert settings.sasl_password is not None
        return faust.SASLCredentials(username=settings.sasl_username,
                                     password=settings.sasl_password.get_secret_value(), ssl_context=context,
                                     mechanism=settings.sasl_mechanism or "SCRAM-SHA-512")
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def create_app(settings: WorkerSettings) -> faust.App:
    """A Faust app with the pipeline's agent, timers and tasks; nothing connects until a worker starts it."""
    settings.datadir.mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=broker_urls(settings.bootstrap_servers),
        store="memory://",
        datadir=str(settings.datadir),
        autodiscover=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=settings.replication_factor,
        topic_allow_declare=True,  # internal topics (the assignor's); `ensure_topics` made ours first
        table_standby_replicas=0,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=settings.heartbeat_interval_s,
        broker_rebalance_timeout=max(settings.session_timeout_s, 6.0),
        broker_commit_interval=settings.commit_interval_s,
        broker_max_poll_records=settings.poll_max_records or max(1, settings.batch_max // 4),
        stream_buffer_maxsize=settings.stream_buffer_max or settings.batch_max,
        consumer_max_fetch_size=settings.fetch_max_partition_bytes,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        stream_wait_empty=False,  # the pipeline settles what it was handed itself (`Pipeline._settle`)
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind="127.0.0.1",
        worker_redirect_stdouts=False,
        broker_credentials=broker_credentials(settings),
    )
    use_fetch_wait(app, settings.fetch_max_wait_ms)  # before the first topic: Faust has no setting for it
    wire(app, Pipeline(app, settings, topology(settings.topic_prefix, settings.partitions)))
    return app


def wire(app: faust.App, pipeline: Pipeline) -> None:
    """Register the pipeline with the app: its agent, timers, tasks and signal receivers."""
    app_id = pipeline.settings.app_id
    app.agent(pipeline.source, name=f"{app_id}.pipeline")(pipeline.consume)
    app.timer(HEARTBEAT_S, name=f"{app_id}.heartbeat")(pipeline.observe.heartbeat)
    app.timer(pipeline.settings.parser_idle_flush_s, name=f"{app_id}.flush_parsers")(pipeline.flush_parsers)
    app.timer(pipeline.settings.sweep_interval_s, on_leader=True, name=f"{app_id}.sweep")(pipeline.sweep)
    app.task(pipeline.observe.serve)
    app.task(pipeline.publisher)
    app.task(pipeline.store.start)
    app.on_partitions_revoked.connect(pipeline.on_partitions_revoked)
    app.on_before_shutdown.connect(pipeline.on_shutdown)


class Pipeline:
    """The agent's body (`consume`), its committer, and the timers' and signals' work, over one store."""

    def __init__(self, app: faust.App, settings: WorkerSettings, topo: Topology) -> None:
        self.app = app
        self.settings = settings
        self.topo = topo
        self._queue: asyncio.Queue[list[Outgoing]] | None = None
        self._sent: list[int] = []  # outbox ids published, not yet marked sent
        self._sent_since = 0.0  # when the oldest of them was published (monotonic)
        self.kinds = {t.name: t_kinds for t in topo.inputs if (t_kinds := topo.kinds_for(t.name))}
        self.store = IntakeProcess(settings.database_url, settings.policy, settings.cluster, kinds=self.kinds,
                                process=settings.store_process, log_level=logging.getLogger().level,
                                log_format=settings.log_format,
                                bounds=ParserBounds(settings.parser_max_nodes, settings.parser_node_idle_s,
                                                    settings.parser_remembered_nodes))
        self._batch_id = 0
        self._acks = Acks()
        self._stream: Any = None  # the agent's stream, once it runs: acknowledgements go through it
        self._batches: Batches | None = None  # what the agent handed the committer, once it runs
        self._committer: asyncio.Task[None] | None = None
        self._store_lock = asyncio.Lock()  # a store call and the noting of its holds, as one step
        self.identity = _identity_gate(settings)
        self.dead_letters = {t.name: self._topic(t.dead_letter) for t in topo.inputs}
        self.outputs = {"incidents": self._topic(topo.incidents.name), "actions": self._topic(topo.actions.name)}
        self.source = self._topic(*(t.name for t in topo.inputs))
        self.observe = WorkerObserver(app, settings)

    def _topic(self, *names: str) -> Any:
        """Raw bytes in and out: decoding is ours, so a bad message can be dead-lettered as it came."""
        return self.app.topic(*names, partitions=self.settings.partitions, key_serializer="raw",
                              value_serializer="raw")

    # -- the agent ------------------------------------------------------------------------------

    async def consume(self, stream: Any) -> None:
        """Hand each message to the committer as it arrives; the committer stores what has arrived.

        Batches adapt to the load: when the store is idle a message is committed at once, and while
        a transaction runs the next messages queue up, so the next batch holds whatever arrived, up
        to `batch_max` (`_commit_loop` paces the transactions). Messages are acknowledged (in Faust)
        only after the transaction that stored them committed: the stream is Faust's manual-ack stream.
        """
        stream = self._stream = stream.noack()
        batches = self._batches = Batches(self.settings.batch_max, self.settings.batch_max * _PENDING_BATCHES)
        committer = self._committer = asyncio.create_task(self._commit_loop(stream, batches),
                                                          name="xidpipe-committer")
        try:
            async for event in stream.events():
                self.observe.consumed(event.message.topic)
                await batches.put(event, committer)
        finally:
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer

    async def _commit_loop(self, stream: Any, batches: Batches) -> None:
        """Commit what has arrived, acknowledge it, repeat.

        After a transaction that took T, the next one starts no sooner than T later (at most
        `batch_within_s`) unless a full batch is waiting: under load the store is busy at most about
        half the time, and batches grow; when the stream is quiet the first message is committed at
        once.
        """
        loop = asyncio.get_running_loop()
        next_start = 0.0
        while True:
            await batches.wait_ready()
            pause = next_start - loop.time()
            if pause > 0 and len(batches) < batches.max_batch:
                await batches.wait_full(pause)
            events = batches.take()
            started = loop.time()
            for event in await self._commit(events):
                await stream.ack(event)
            batches.settle(len(events))
            ended = loop.time()
            next_start = ended + min(ended - started, self.settings.batch_within_s)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("batch of %d messages handled in %.1f ms", len(events), (ended - started) * 1000)

    async def _commit(self, events: Sequence[Any]) -> list[Any]:
        """Decode, parse and store the events' messages in one transaction; dead-letter what cannot be
        handled. Returns the events to acknowledge now (see `Acks`).

        If the transaction fails for another reason than an unavailable database, the messages are
        stored one by one, and the ones that still fail go to the dead-letter topic.
        """
        self._batch_id += 1
        started = time.monotonic()
        events, stale = current_events(events, getattr(self.app, "consumer_generation_id", None))
        if stale:  # Faust's stream skips such events too, unless they already reached the committer
            log.info("%d messages fetched before a rebalance left to their partitions' next reader", stale)
        messages, refused = await self._verified(events)
        async with self._store_lock:
            result: BatchResult
            try:
                result = await self._process(self._batch_id, messages) if messages else IntakeResult(marked=False)
            except PermanentError:
                log.warning("a batch of %d messages could not be stored; storing them one by one", len(messages))
                try:
                    result = await self._process(self._batch_id, messages, per_message=True)
                except PermanentError as exc:  # not even one by one: keep them all, say why, go on
                    error, now = str(exc.__cause__ or exc), datetime.now(UTC)
                    result = BatchResult(dead_letters=[DeadLetter("processing_error", error, m.topic, m.partition,
                                                                  m.offset, m.key, m.value, now) for m in messages])
            if isinstance(result, IntakeResult):
                self._acks.note(result.held, result.released)
            ready = self._acks.done(events)
        self.observe.batch(len(events), time.monotonic() - started, result)
        for dl in (*refused, *result.dead_letters):
            await self.dead_letter(dl)
        await self._publish(result.outgoing)
        return ready

    async def _verified(self, events: Sequence[Any]) -> tuple[list[Message], list[DeadLetter]]:
        """The events' messages that may speak for the node they name, and dead letters for the rest
        (`streams.node_identity`; every message passes when verification is off, and those of the
        kube topic, which the responder writes, always do)."""
        messages: list[Message] = []
        refused: list[DeadLetter] = []
        raw = [e.message for e in events]
        verdicts: list[Any] = [None] * len(raw)
        # The kube topic is the responder's, not a node agent's: its ACL lets only the responder write it.
        agents = [i for i, m in enumerate(raw) if m.topic != self.topo.kube.name]
        if self.identity is not None and agents:  # side by side: a node's slow or failing reviews hold no one else's
            checked = await self.identity.check_many([(raw[i].key, raw[i].headers) for i in agents])
            for i, verdict in zip(agents, checked, strict=True):
                verdicts[i] = verdict
        for m, verdict in zip(raw, verdicts, strict=True):
            if verdict is not None and not verdict.accepted:
                log.warning("node record refused (%s): %s", verdict.reason, verdict.detail)
                refused.append(DeadLetter(f"node_identity_{verdict.reason}", verdict.detail, m.topic,
                                          m.partition, m.offset, m.key, m.value, datetime.now(UTC)))
            else:
                messages.append(Message(m.topic, m.partition, m.offset, m.key, m.value))
        return messages, refused

    async def _process(self, batch_id: int, messages: Sequence[Message], per_message: bool = False) -> IntakeResult:
        """One transaction; transient database failures are retried with backoff until they pass.

        It also marks the outbox rows published since the last transaction as sent.
        """
        sent, self._sent = self._sent, []
        try:
            result = await self._process_marking(batch_id, messages, sent, per_message)
        except BaseException:
            self._sent.extend(sent)  # not marked: the next transaction does it
            raise
        if not result.marked:
            self._sent[:0] = sent
        return result

    async def _process_marking(self, batch_id: int, messages: Sequence[Message], sent: list[int],
                               per_message: bool) -> IntakeResult:
        """The store call, run again while the store says it may pass (`StoreRetry`): an unavailable
        database until it is back (backoff doubling from 0.2 s to `db_retry_max_s`), a lock conflict
        at once a few times (then as unavailable), a write conflict a few times (then it is the records')."""
        retry = StoreRetries(self.settings.db_retry_max_s)
        while True:
            try:
                return await self.store.handle(batch_id, messages, sent, per_message)
            except StoreRetry as exc:
                delay, counted = retry.after(exc)
                if counted == "unavailable":
                    self.observe.store_failed(counted, f"database unavailable: {exc.error}")
                elif counted is not None:
                    self.observe.store_failed(counted, "")
                log.warning("transaction not committed (%s); running it again in %.2f s", exc, delay)
                await asyncio.sleep(delay)
            except Exception as exc:
                raise PermanentError(f"{type(exc).__name__}: {exc}") from exc

    # -- output -----------------------------------------------------------------------------------

    async def dead_letter(self, dl: DeadLetter) -> None:
        log.warning("dead letter from %s[%d]@%d: %s: %s", dl.topic, dl.partition, dl.offset, dl.reason,
                    dl.error.splitlines()[0] if dl.error else "")
        topic = self.dead_letters.get(dl.topic)
        if topic is None:
            return
        # The message is acknowledged only once its dead letter is published: retry until Kafka takes it.
        await send_until_taken(topic, dl)
        self.observe.dead_letter(dl)

    async def _publish(self, outgoing: Sequence[Outgoing]) -> None:
        """Hand committed outbox rows to the publisher task: the stream does not wait for Kafka."""
        if outgoing:
            await self._outbox_queue().put(list(outgoing))

    def _outbox_queue(self) -> asyncio.Queue[list[Outgoing]]:
        if self._queue is None:
            self._queue = asyncio.Queue(maxsize=_PUBLISH_QUEUE_BATCHES)
        return self._queue

    async def publisher(self) -> None:
        """Publish outbox rows in commit order; a failure leaves them unsent for the sweep to resend."""
        queue = self._outbox_queue()
        while True:
            outgoing = await queue.get()
            try:
                await self._send(outgoing)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("publishing %d outbox rows failed; the sweep resends them", len(outgoing))

    async def _send(self, outgoing: Sequence[Outgoing]) -> None:
        futures = []
        for o in outgoing:
            topic = self.outputs[o.stream]
            futures.append(await topic.send(key=o.key.encode(), value=json.dumps(o.payload).encode(), force=True,
                                            headers=[("xidpipe-outbox-id", str(o.outbox_id).encode())]))
        await asyncio.gather(*futures)
        # Marked sent by the next transaction (or `mark_published` when none comes): the next outbox rows
        # are published without waiting for the database.
        if not self._sent:
            self._sent_since = time.monotonic()
        self._sent.extend(o.outbox_id for o in outgoing)

    async def mark_published(self, older_than_s: float = 0.0) -> None:
        """Mark the published outbox rows that no transaction marked within `older_than_s`."""
        if self._sent and time.monotonic() - self._sent_since >= older_than_s:
            sent, self._sent = self._sent, []
            try:
                await self.store.mark_sent(sent)
            except Exception:
                self._sent.extend(sent)
                raise

    # -- timers -----------------------------------------------------------------------------------

    async def flush_parsers(self) -> None:
        """Store the kernel records of quiet nodes, then acknowledge the lines they held.

        Not while a rebalance pauses the stream: every node would look quiet, and a record closed
        then may belong to a partition that another worker reads next, from its first line.
        """
        if self.app.rebalancing:
            return
        try:
            await self.mark_published(older_than_s=self.settings.parser_idle_flush_s)
            async with self._store_lock:
                result = await self.store.flush_idle(self.settings.parser_idle_flush_s)
                self.observe.stored(result)
                self._acks.note((), result.released)
                ready = self._acks.drain()
            await self._publish(result.outgoing)
            for event in ready:
                await self._stream.ack(event)
        except asyncio.CancelledError:
            raise
        except StoreRetry as exc:
            log.warning("flushing kernel records or marking published outbox rows failed (%s); the next run "
                        "retries", exc)
        except Exception:
            log.exception("flushing kernel records or marking published outbox rows failed; the next run retries")

    async def on_partitions_revoked(self, sender: Any, /, *args: Any, signal: Any = None, **__: Any) -> None:
        """Drop what was kept of the revoked partitions (their nodes' parsers, held lines and waiting
        events): whoever reads a partition next starts at its committed offset, at or before the first
        held line, and parses them again."""
        revoked: Iterable[Any] = args[0] if args else ()
        partitions = sorted({(tp.topic, tp.partition) for tp in revoked})
        await self._settle()
        await self.app.consumer.commit()  # what the settled batches acknowledged, while the partitions are ours
        async with self._store_lock:
            dropped = self._acks.drop(partitions)
            parsers = await self.store.forget(partitions)
        if dropped or parsers:
            log.info("partitions revoked: %d messages left unacknowledged, the kernel-log parsers of %d nodes "
                     "dropped (their open records left to the next reader)", dropped, parsers)

    async def on_shutdown(self, sender: Any, /, *_: Any, signal: Any = None, **__: Any) -> None:
        """Settle what the agent handed over (Faust commits the offsets when its consumer stops), then mark
        the published outbox rows sent. Open kernel records are left as they are: their lines are not
        acknowledged, and the next worker parses them again."""
        await self._settle()
        self.observe.stop()
        try:
            await self.mark_published()
        except Exception:
            log.exception("published outbox rows could not be marked sent at shutdown; the sweep resends them")

    async def _settle(self) -> None:
        """Until the committer stored and acknowledged every event the agent handed it (or stopped): what
        Faust's `stream_wait_empty` would wait for, less the held lines it would wait for for ever."""
        if self._batches is None or self._committer is None:
            return
        settled = asyncio.ensure_future(self._batches.wait_settled())
        try:
            await asyncio.wait([settled, self._committer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            settled.cancel()

    async def sweep(self) -> None:
        try:
            await self._publish(await self.store.sweep())
            await self._publish(await self.store.unsent(self.settings.outbox_resend_after_s))
            if self.settings.outbox_keep_sent_s > 0:
                pruned = await self.store.prune_sent(self.settings.outbox_keep_sent_s)
                if pruned:
                    log.info("%d outbox rows sent over %.0f s ago deleted", pruned, self.settings.outbox_keep_sent_s)
        except Exception:
            log.exception("sweep failed; the next one retries")


_PENDING_BATCHES = 2  # messages waiting for the committer, in batches, before the stream waits
_FIRST_RETRY_S = 0.2  # first wait before a store call or a dead letter is tried again; it doubles up to a most
_LOCK_RETRIES = 5  # a lock conflict is run again at once this many times, then waited for as the database's
_LOCK_JITTER_S = 0.02  # per lock retry: apart from the other transaction's retry
_MAX_CONFLICT_RETRIES = 5  # a write conflict that outlives this many retries is not a race but a bad record
_DEAD_LETTER_RETRY_MAX_S = 30.0
_PUBLISH_QUEUE_BATCHES = 1000  # committed batches waiting to be published before the stream waits


class PermanentError(Exception):
    """A store call that no retry will make pass: the batch is stored message by message, and what still
    fails is dead-lettered."""


class StoreRetries:
    """How long to wait before a store call that raised `StoreRetry` is run again, by kind and count."""

    def __init__(self, max_delay_s: float) -> None:
        self.max_delay_s = max_delay_s
        self._delay = _FIRST_RETRY_S
        self._locks = 0
        self._conflicts = 0

    def after(self, exc: StoreRetry) -> tuple[float, str | None]:
        """Seconds to wait, and the database error it counts as (`unavailable`, `conflict`; None: none);
        `PermanentError` when a write conflict outlived its retries."""
        if exc.kind == "lock_conflict" and self._locks < _LOCK_RETRIES:
            self._locks += 1
            return random.uniform(0.0, _LOCK_JITTER_S * self._locks), None
        counted = "unavailable"
        if exc.kind == "write_conflict":
            counted = "conflict"
            self._conflicts += 1
            if self._conflicts > _MAX_CONFLICT_RETRIES:
                raise PermanentError(f"{exc.error}: {exc.detail}") from exc
        delay, self._delay = self._delay, min(self._delay * 2, self.max_delay_s)
        return delay, counted


async def send_until_taken(topic: Any, dl: DeadLetter) -> None:
    """Publish `dl` to `topic` (a Faust topic), retrying with backoff until Kafka acknowledges it."""
    delay = _FIRST_RETRY_S
    while True:
        try:
            await (await topic.send(key=dl.key, value=dl.to_json(), headers=dl.headers(), force=True))
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("dead letter from %s[%d]@%d not published (%s: %s); retrying in %.1f s", dl.topic,
                        dl.partition, dl.offset, type(exc).__name__, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _DEAD_LETTER_RETRY_MAX_S)


def _identity_gate(settings: WorkerSettings) -> Any:
    if not settings.verify_node_identity:
        log.warning("node identity is not verified (XIDPIPE_WORKER_VERIFY_NODE_IDENTITY=false): any client allowed to "
                    "write the node topics can report faults for any node")
        return None
    from streams.node_identity import build_gate

    return build_gate(settings)
