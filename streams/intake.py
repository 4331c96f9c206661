"""The intake: input messages in, one transaction out, with dead letters for what cannot be stored."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields

import sqlalchemy as sa

from streams.decode import DeadLetter, decode_message
from streams.ingest import Ingest, Item, Ref
from streams.outbox import Outgoing
from streams.store import BatchResult, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Message:
    """An input message as consumed: what the intake decodes, and what a dead letter repeats."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(slots=True)
class IntakeResult(BatchResult):
    """A transaction's result, and which input messages the worker must not acknowledge yet.

    `held`: messages of this call whose kernel record is still open. `released`: messages
    held by an earlier call whose record this call stored. A held message is acknowledged once
    it is released; a worker that stops before that leaves it (and every later message of its
    partition) uncommitted, and whoever reads the partition next parses the record again.
    """

    held: list[Ref] = field(default_factory=list)
    released: list[Ref] = field(default_factory=list)

    @classmethod
    def of(cls, result: BatchResult, held: Sequence[Ref] = (), released: Sequence[Ref] = ()) -> IntakeResult:
        values = {f.name: getattr(result, f.name) for f in fields(BatchResult)}
        return cls(**values, held=list(held), released=list(released))


class Intake:
    """Input messages in, one transaction out: decode, parse (one kernel-log parser per node) and store.

    It runs where the store runs (see `streams.store_process.AsyncStore`), so the stream's event loop
    only hands over the messages' bytes. A batch is decoded and parsed once: a retry of the same batch
    (after a transient database error) stores the same items, and the parsers see each line once.
    """

    def __init__(self, store: Store, kinds: dict[str, frozenset[str]]) -> None:
        self.store = store
        self.kinds = kinds
        self.ingest = Ingest()
        self._prepared: _Prepared | None = None
        self._unstored: tuple[list[Item], list[Ref]] = ([], [])  # closed by `flush_idle`, not yet stored

    def ping(self) -> bool:
        return True

    def handle(self, batch_id: int, messages: Sequence[Message], sent: Sequence[int],
               per_message: bool = False) -> IntakeResult:
        """Store the batch in one transaction (or, `per_message`, one per message, dead-lettering the
        messages that fail); database errors of the one transaction are raised for the caller to retry."""
        if self._prepared is None or self._prepared.batch_id != batch_id:
            prepared_, dead_ = self._prepare(messages)
            self._prepared = _Prepared(batch_id, prepared_, dead_, *self.ingest.holds())
        p = self._prepared
        prepared, dead = p.items, p.dead
        if not prepared:  # nothing to store (lines that are no faults, dead letters): no transaction
            return IntakeResult(dead_letters=list(dead), marked=False, held=p.held, released=p.released)
        if not per_message:
            res = self.store.process([i for _, its in prepared for i in its], sent=sent)
            res.dead_letters = list(dead)
            return IntakeResult.of(res, p.held, p.released)
        res = IntakeResult(dead_letters=list(dead), held=p.held, released=p.released)
        if sent:
            self.store.mark_sent(sent)
        for msg, its in prepared:
            try:
                res.outgoing.extend(self.store.process(its).outgoing)
            except (sa.exc.OperationalError, sa.exc.InterfaceError, sa.exc.TimeoutError):
                raise
            except Exception as exc:  # this message's records cannot be stored: keep it, say why, go on
                log.exception("message %s[%d]@%d could not be stored", msg.topic, msg.partition, msg.offset)
                res.dead_letters.append(dead_letter(msg, "processing_error", f"{type(exc).__name__}: {exc}"))
        return res

    def _prepare(self, messages: Sequence[Message]) -> tuple[list[tuple[Message, list[Item]]], list[DeadLetter]]:
        prepared: list[tuple[Message, list[Item]]] = []
        dead: list[DeadLetter] = []
        for msg in messages:
            rec = decode_message(topic=msg.topic, partition=msg.partition, offset=msg.offset, key=msg.key,
                                 value=msg.value, kinds=self.kinds.get(msg.topic, frozenset()))
            if isinstance(rec, DeadLetter):
                dead.append(rec)
                continue
            try:
                items = self.ingest.items(rec, msg.topic, (msg.topic, msg.partition, msg.offset))
            except Exception as exc:  # a record the pure code cannot handle: keep it, say why, go on
                log.exception("record %s of %s could not be mapped", rec.record_id, rec.node)
                dead.append(dead_letter(msg, "processing_error", f"{type(exc).__name__}: {exc}"))
                continue
            if items:
                prepared.append((msg, items))
        return prepared, dead

    def flush_idle(self, idle_s: float) -> IntakeResult:
        """Store the kernel records of nodes quiet for `idle_s` seconds (see `Ingest.flush_idle`).

        If the transaction fails, the records (and the messages they release) are stored by the next call.
        """
        items, released = self._unstored
        items = items + self.ingest.flush_idle(idle_s)
        released = released + self.ingest.holds()[1]  # closing records holds no new line
        self._unstored = (items, released)
        result = self.store.process(items) if items else BatchResult()
        self._unstored = ([], [])
        return IntakeResult.of(result, released=released)

    def forget(self, partitions: Iterable[tuple[str, int]]) -> int:
        """The worker no longer reads `partitions`: drop what its open records held (see `Ingest.forget`)."""
        gone = set(partitions)
        items, released = self._unstored
        self._unstored = (items, [r for r in released if r[:2] not in gone])
        return self.ingest.forget(gone)

    def create_schema(self) -> None:
        self.store.create_schema()

    def sweep(self) -> list[Outgoing]:
        return self.store.sweep()

    def unsent(self, older_than_s: float) -> list[Outgoing]:
        return self.store.unsent(older_than_s)

    def mark_sent(self, ids: Sequence[int]) -> None:
        self.store.mark_sent(ids)

    def dispose(self) -> None:
        self.store.dispose()


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A batch decoded and parsed once (a retry stores the same items and reports the same holds)."""

    batch_id: int
    items: list[tuple[Message, list[Item]]]
    dead: list[DeadLetter]
    held: list[Ref]
    released: list[Ref]


def dead_letter(msg: Message, reason: str, error: str) -> DeadLetter:
    """The dead letter of `msg`: the reason, the error (cut to 2,000 characters), the original bytes."""
    return DeadLetter(reason, error[:2000], msg.topic, msg.partition, msg.offset, msg.key, msg.value)
