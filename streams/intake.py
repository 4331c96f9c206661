"""The intake: input messages in, one transaction out, with dead letters for what cannot be stored."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from streams.decode import DeadLetter, decode_message
from streams.ingest import Ingest, Item
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
        self._prepared: tuple[int, list[tuple[Message, list[Item]]], list[DeadLetter]] | None = None

    def ping(self) -> bool:
        return True

    def handle(self, batch_id: int, messages: Sequence[Message], sent: Sequence[int],
               per_message: bool = False) -> BatchResult:
        """Store the batch in one transaction (or, `per_message`, one per message, dead-lettering the
        messages that fail); database errors of the one transaction are raised for the caller to retry."""
        if self._prepared is None or self._prepared[0] != batch_id:
            self._prepared = (batch_id, *self._prepare(messages))
        _, prepared, dead = self._prepared
        if not prepared:  # nothing to store (lines that are no faults, dead letters): no transaction
            return BatchResult(dead_letters=list(dead), marked=False)
        if not per_message:
            res = self.store.process([i for _, its in prepared for i in its], sent=sent)
            res.dead_letters = list(dead)
            return res
        res = BatchResult(dead_letters=list(dead))
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
                items = self.ingest.items(rec, msg.topic)
            except Exception as exc:  # a record the pure code cannot handle: keep it, say why, go on
                log.exception("record %s of %s could not be mapped", rec.record_id, rec.node)
                dead.append(dead_letter(msg, "processing_error", f"{type(exc).__name__}: {exc}"))
                continue
            if items:
                prepared.append((msg, items))
        return prepared, dead

    def flush_idle(self, idle_s: float) -> BatchResult:
        """Store the kernel records of nodes quiet for `idle_s` seconds (see `Ingest.flush_idle`)."""
        items = self.ingest.flush_idle(idle_s)
        return self.store.process(items) if items else BatchResult()

    def flush_all(self, sent: Sequence[int]) -> int:
        """At shutdown: store every open kernel record; returns how many items were stored."""
        items = self.ingest.flush_all()
        if items:
            self.store.process(items, sent=sent)
        elif sent:
            self.store.mark_sent(sent)
        return len(items)

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


def dead_letter(msg: Message, reason: str, error: str) -> DeadLetter:
    """The dead letter of `msg`: the reason, the error (cut to 2,000 characters), the original bytes."""
    return DeadLetter(reason, error[:2000], msg.topic, msg.partition, msg.offset, msg.key, msg.value)
