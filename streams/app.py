"""The Faust application: node records in, incidents and action requests out.

One agent consumes the four input topics (co-partitioned by node) and hands the messages, in
batches that adapt to the load, to the intake (`streams.intake.Intake`, in a process of its own):
decode → parse and map to items (pure) → one store transaction → the outbox rows that transaction
wrote come back and are published. A message that cannot be decoded goes to its topic's
dead-letter twin with the reason and the original bytes; the stream keeps going.

Delivery is at least once. A batch is acknowledged only after its transaction committed, and the
transaction drops records already handled, so a redelivered batch changes nothing. A kernel line
whose multi-line record is still open in its node's parser is *held*: it, and every later message
of its partition, is acknowledged only once that record is stored (`_Acks`), so the committed
offset never passes it, nor stands inside a stored record (`streams.items`). A worker that dies,
stops or loses the partition leaves the record's lines to whoever reads the partition next, who
parses the whole record again; what a worker kept of a partition it lost is dropped, and events
of it that were fetched before the rebalance are left alone. Messages to publish are
rows of the outbox, written in the same transaction and marked sent after Kafka acknowledged
them; a sweep resends any left unsent by a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import faust
import sqlalchemy as sa

from models.topics import Topology, topology
from streams.decode import DeadLetter
from streams.intake import IntakeResult, Message
from streams.intake_process import IntakeProcess, IntakeUnavailable
from streams.items import ParserBounds, Ref
from streams.observe import HEARTBEAT_S, WorkerObserver
from streams.outbox import Outgoing
from streams.settings import WorkerSettings
from streams.store import BatchResult
from streams.topics import ssl_context

log = logging.getLogger(__name__)



def broker_urls(bootstrap: str) -> list[str]:
    return [f"kafka://{h.strip()}" for h in bootstrap.split(",") if h.strip()]


def _limit_fetch_wait(max_wait_ms: int) -> None:
    """Make Faust's consumer use `max_wait_ms` as the fetch wait instead of its fixed 1500 ms.

    aiokafka sends one fetch per broker for the partitions that have nothing buffered. While the
    agent works through a batch from busy partitions, that fetch holds only idle ones, and the
    broker keeps it for the full wait: the busy partitions are not fetched again for up to 1.5 s.
    A short wait bounds that stall.
    """
    from faust.transport.drivers import aiokafka as driver

    thread_cls: Any = driver.AIOKafkaConsumerThread
    original = getattr(thread_cls, "_xidpipe_original_create", None) or thread_cls._create_worker_consumer

    def create(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = max_wait_ms
        return consumer

    thread_cls._xidpipe_original_create = original
    thread_cls._create_worker_consumer = create


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
    """A Faust app with the pipeline's agent and timers; nothing connects until a worker starts it."""
    settings.datadir.mkdir(parents=True, exist_ok=True)
    _limit_fetch_wait(settings.fetch_max_wait_ms)
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
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind="127.0.0.1",
        worker_redirect_stdouts=False,
        broker_credentials=broker_credentials(settings),
    )
    Pipeline(app, settings, topology(settings.topic_prefix, settings.partitions))
    return app


class Pipeline:
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
                                bounds=ParserBounds(settings.parser_max_nodes, settings.parser_node_idle_s,
                                                    settings.parser_remembered_nodes))
        self._batch_id = 0
        self._acks = _Acks()
        self._stream: Any = None  # the agent's stream, once it runs: acknowledgements go through it
        self._store_lock = asyncio.Lock()  # a store call and the noting of its holds, as one step
        self.identity = _identity_gate(settings)
        self.dead_letters = {t.name: self._topic(t.dead_letter) for t in topo.inputs}
        self.outputs = {"incidents": self._topic(topo.incidents.name), "actions": self._topic(topo.actions.name)}
        self.observe = WorkerObserver(app, settings)
        app.timer(HEARTBEAT_S, name=f"{settings.app_id}.heartbeat")(self.observe.heartbeat)
        app.task(self.observe.serve)
        source = self._topic(*(t.name for t in topo.inputs))
        app.agent(source, name=f"{settings.app_id}.pipeline")(self.consume)
        app.timer(settings.parser_idle_flush_s, name=f"{settings.app_id}.flush_parsers")(self.flush_parsers)
        app.timer(settings.sweep_interval_s, on_leader=True, name=f"{settings.app_id}.sweep")(self.sweep)
        app.on_before_shutdown.connect(self.on_shutdown)
        app.on_partitions_revoked.connect(self.on_partitions_revoked)
        app.task(self.publisher)
        app.task(self.store.start)

    def _topic(self, *names: str) -> Any:
        """Raw bytes in and out: decoding is ours, so a bad message can be dead-lettered as it came."""
        return self.app.topic(*names, partitions=self.settings.partitions, key_serializer="raw",
                              value_serializer="raw")

    # -- the agent ------------------------------------------------------------------------------

    async def consume(self, stream: Any) -> None:
        """Hand each message to the committer as it arrives; the committer stores what has arrived.

        Batches adapt to the load: when the store is idle a message is committed at once, and while
        a transaction runs the next messages queue up, so the next batch holds whatever arrived, up
        to `batch_max` (`_committer` paces the transactions). Messages are acknowledged (in Faust)
        only after the transaction that stored them committed.
        """
        stream.enable_acks = False  # acknowledged by the committer, after the commit
        self._stream = stream
        batches = _Batches(self.settings.batch_max, self.settings.batch_max * _PENDING_BATCHES)
        committer = asyncio.create_task(self._committer(stream, batches), name="xidpipe-committer")
        try:
            async for _ in stream:
                event = stream.current_event
                if event is not None:
                    self.observe.consumed(event.message.topic)
                    await batches.put(event, committer)
        finally:
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer

    async def _committer(self, stream: Any, batches: _Batches) -> None:
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
            ended = loop.time()
            next_start = ended + min(ended - started, self.settings.batch_within_s)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("batch of %d messages handled in %.1f ms", len(events), (ended - started) * 1000)

    async def _commit(self, events: Sequence[Any]) -> list[Any]:
        """Decode, parse and store the events' messages in one transaction; dead-letter what cannot be
        handled. Returns the events to acknowledge now (see `_Acks`).

        If the transaction fails for another reason than an unavailable database, the messages are
        stored one by one, and the ones that still fail go to the dead-letter topic.
        """
        self._batch_id += 1
        started = time.monotonic()
        events = self._current(events)
        messages, refused = await self._verified(events)
        async with self._store_lock:
            result: BatchResult
            try:
                result = await self._process(self._batch_id, messages) if messages else IntakeResult(marked=False)
            except _PermanentError:
                log.warning("a batch of %d messages could not be stored; storing them one by one", len(messages))
                try:
                    result = await self._process(self._batch_id, messages, per_message=True)
                except _PermanentError as exc:  # not even one by one: keep them all, say why, go on
                    error = str(exc.__cause__ or exc)
                    result = BatchResult(dead_letters=[DeadLetter("processing_error", error, m.topic, m.partition,
                                                                  m.offset, m.key, m.value) for m in messages])
            if isinstance(result, IntakeResult):
                self._acks.note(result.held, result.released)
            ready = self._acks.done(events)
        self.observe.batch(len(events), time.monotonic() - started, result)
        for dl in (*refused, *result.dead_letters):
            await self.dead_letter(dl)
        await self._publish(result.outgoing)
        return ready

    def _current(self, events: Sequence[Any]) -> Sequence[Any]:
        """The events fetched in the consumer group's current generation. An event fetched before a
        rebalance is not handled nor acknowledged: its partition was revoked, and whoever reads it now
        starts at its committed offset (Faust's stream skips such events too, unless they already
        reached the committer)."""
        generation = getattr(self.app, "consumer_generation_id", None)
        stale = [e for e in events if getattr(e.message, "generation_id", None) not in (None, generation)]
        if not stale:
            return events
        log.info("%d messages fetched before a rebalance left to their partitions' next reader", len(stale))
        return [e for e in events if e not in stale]

    async def _verified(self, events: Sequence[Any]) -> tuple[list[Message], list[DeadLetter]]:
        """The events' messages that may speak for the node they name, and dead letters for the rest
        (`streams.node_identity`; every message passes when verification is off)."""
        messages: list[Message] = []
        refused: list[DeadLetter] = []
        for m in (e.message for e in events):
            if self.identity is not None:
                verdict = await self.identity.check(m.key, m.headers)
                if not verdict.accepted:
                    log.warning("node record refused (%s): %s", verdict.reason, verdict.detail)
                    refused.append(DeadLetter(f"node_identity_{verdict.reason}", verdict.detail, m.topic,
                                              m.partition, m.offset, m.key, m.value))
                    continue
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
        delay = 0.2
        conflicts = 0
        while True:
            try:
                return await self.store.handle(batch_id, messages, sent, per_message)
            except (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError, IntakeUnavailable) as exc:
                log.warning("database unavailable (%s); retrying in %.1f s", type(exc).__name__, delay)
                self.observe.store_failed("unavailable", f"database unavailable: {type(exc).__name__}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.db_retry_max_s)
            except sa.exc.IntegrityError as exc:
                # A concurrent writer (another worker after a rebalance) got there first: the retry sees it.
                conflicts += 1
                self.observe.store_failed("conflict", "")
                if conflicts > _MAX_CONFLICT_RETRIES:
                    raise _PermanentError(f"IntegrityError: {exc.orig}") from exc
                log.warning("conflicting write (%s); retrying", exc.orig)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.db_retry_max_s)
            except Exception as exc:
                raise _PermanentError(f"{type(exc).__name__}: {exc}") from exc

    # -- output -----------------------------------------------------------------------------------

    async def dead_letter(self, dl: DeadLetter) -> None:
        log.warning("dead letter from %s[%d]@%d: %s: %s", dl.topic, dl.partition, dl.offset, dl.reason,
                    dl.error.splitlines()[0] if dl.error else "")
        topic = self.dead_letters.get(dl.topic)
        if topic is None:
            return
        # The message is acknowledged only once its dead letter is published: retry until Kafka takes it.
        delay = _DEAD_LETTER_RETRY_S
        while True:
            try:
                fut = await topic.send(key=dl.key, value=dl.to_json(), headers=dl.headers(), force=True)
                await fut
                self.observe.dead_letter(dl)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("dead letter from %s[%d]@%d not published (%s: %s); retrying in %.1f s", dl.topic,
                            dl.partition, dl.offset, type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _DEAD_LETTER_RETRY_MAX_S)

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
        except Exception:
            log.exception("flushing kernel records or marking published outbox rows failed; the next run retries")

    async def on_partitions_revoked(self, sender: Any, /, *args: Any, signal: Any = None, **__: Any) -> None:
        """Drop what was kept of the revoked partitions (their nodes' parsers, held lines and waiting
        events): whoever reads a partition next starts at its committed offset, at or before the first
        held line, and parses them again."""
        revoked: Iterable[Any] = args[0] if args else ()
        partitions = sorted({(tp.topic, tp.partition) for tp in revoked})
        async with self._store_lock:
            dropped = self._acks.drop(partitions)
            parsers = await self.store.forget(partitions)
        if dropped or parsers:
            log.info("partitions revoked: %d messages left unacknowledged, the kernel-log parsers of %d nodes "
                     "dropped (their open records left to the next reader)", dropped, parsers)

    async def on_shutdown(self, sender: Any, /, *_: Any, signal: Any = None, **__: Any) -> None:
        """Mark the published outbox rows sent. Open kernel records are left as they are: their lines
        are not acknowledged, and the next worker parses them again."""
        self.observe.stop()
        try:
            await self.mark_published()
        except Exception:
            log.exception("published outbox rows could not be marked sent at shutdown; the sweep resends them")

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
_MAX_CONFLICT_RETRIES = 5  # a conflict that outlives this many retries is not a race but a bad record
_DEAD_LETTER_RETRY_S = 0.2  # first wait before publishing a dead letter again; it doubles up to the most below
_DEAD_LETTER_RETRY_MAX_S = 30.0
_PUBLISH_QUEUE_BATCHES = 1000  # committed batches waiting to be published before the stream waits


class _PermanentError(Exception):
    pass


def _identity_gate(settings: WorkerSettings) -> Any:
    if not settings.verify_node_identity:
        log.warning("node identity is not verified (XIDPIPE_WORKER_VERIFY_NODE_IDENTITY=false): any client allowed to "
                    "write the node topics can report faults for any node")
        return None
    from streams.node_identity import build_gate

    return build_gate(settings)


class _Acks:
    """Which stored events may be acknowledged: per partition in offset order, none from a held one on.

    Faust commits acknowledged offsets up to the first gap, but not reliably so at the start of
    the list (just after its committed offset or a rebalance it commits past an unacknowledged
    message), so the order is kept here. An event waiting behind a held one is *parked*: marked
    acknowledged on its Faust message, which keeps Faust from waiting for it at a rebalance or at
    shutdown without adding its offset to those Faust commits. It is unparked before it is acknowledged.
    """

    def __init__(self) -> None:
        self._held: set[Ref] = set()
        self._waiting: dict[tuple[str, int], deque[Any]] = {}  # per partition, in offset order
        self._touched: set[tuple[str, int]] = set()  # partitions with a released message since `drain`

    def __len__(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def note(self, held: Iterable[Ref], released: Iterable[Ref]) -> None:
        self._held.update(held)
        for ref in released:
            self._held.discard(ref)
            self._touched.add(ref[:2])

    def done(self, events: Iterable[Any]) -> list[Any]:
        """The stored `events` (in arrival order) and the waiting ones that may be acknowledged now."""
        ready: list[Any] = []
        for event in events:
            m = event.message
            queue = self._waiting.get((m.topic, m.partition))
            if queue is None:
                if (m.topic, m.partition, m.offset) not in self._held:
                    ready.append(event)
                    continue
                queue = self._waiting[(m.topic, m.partition)] = deque()
            m.acked = True  # parked
            queue.append(event)
        return ready + self.drain()

    def drain(self) -> list[Any]:
        """The waiting events that may be acknowledged now, unparked."""
        ready: list[Any] = []
        for tp in self._touched:
            queue = self._waiting.get(tp)
            while queue:
                m = queue[0].message
                if (m.topic, m.partition, m.offset) in self._held:
                    break
                m.acked = False
                ready.append(queue.popleft())
            if queue is not None and not queue:
                del self._waiting[tp]
        self._touched.clear()
        return ready

    def drop(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Forget the events of `partitions` (they stay parked, never acknowledged); returns how many."""
        gone = set(partitions)
        n = sum(len(self._waiting.pop(tp, ())) for tp in gone)
        self._held = {r for r in self._held if r[:2] not in gone}
        self._touched -= gone
        return n


class _Batches:
    """Events waiting for the committer, in arrival order, with backpressure."""

    def __init__(self, max_batch: int, max_pending: int) -> None:
        self.max_batch = max_batch
        self.max_pending = max(max_pending, max_batch)
        self._pending: deque[Any] = deque()
        self._ready = asyncio.Event()
        self._full = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()

    def __len__(self) -> int:
        return len(self._pending)

    async def put(self, event: Any, committer: asyncio.Task[None]) -> None:
        while len(self._pending) >= self.max_pending:
            self._space.clear()
            space = asyncio.ensure_future(self._space.wait())
            try:
                await asyncio.wait([committer, space], return_when=asyncio.FIRST_COMPLETED)
            finally:
                space.cancel()
            if committer.done():
                committer.result()  # the committer failed: its error stops the agent
                raise RuntimeError("the committer stopped")
        self._pending.append(event)
        self._ready.set()
        if len(self._pending) >= self.max_batch:
            self._full.set()

    async def wait_ready(self) -> None:
        while not self._pending:
            self._ready.clear()
            await self._ready.wait()

    async def wait_full(self, timeout: float) -> None:
        """Until a full batch is waiting or `timeout` seconds passed."""
        self._full.clear()
        if len(self._pending) < self.max_batch:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), timeout)

    def take(self) -> list[Any]:
        n = min(len(self._pending), self.max_batch)
        out = [self._pending.popleft() for _ in range(n)]
        self._space.set()
        return out
