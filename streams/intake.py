"""The intake: input messages in, one transaction out, with dead letters for what cannot be stored.

A record with a value the history cannot hold (an integer past its column's range, a string longer
than its column or holding a NUL byte, a float that is not finite) is set aside before the
transaction, as a `bad_field` dead letter of its message that names the field: one hostile record
never fails the batch it arrived in. When a transaction fails all the same, the worker stores the
batch message by message, and a message whose records fail together is stored record by record, so
only the records that fail become dead letters.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from functools import cache
from typing import Any

import sqlalchemy as sa

from history.tables import EvidenceRecord, FaultEvent, NodeState
from models.dead_letter import DeadLetter
from streams.decode import decode_message
from streams.items import EvidenceItem, FaultItem, Item, ItemMapper, ParserBounds, Ref
from streams.outbox import Outgoing
from streams.store import BatchResult, Store, StoreRetry

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

    It runs where the store runs (see `streams.intake_process.IntakeProcess`), so the stream's event loop
    only hands over the messages' bytes. A batch is decoded and parsed once: a retry of the same batch
    (after a transient database error) stores the same items, and the parsers see each line once.
    """

    def __init__(self, store: Store, kinds: dict[str, frozenset[str]], bounds: ParserBounds | None = None) -> None:
        self.store = store
        self.kinds = kinds
        self.mapper = ItemMapper(bounds, store.policy)  # per-node parsers, bounded in number and idle time
        self._prepared: _Prepared | None = None
        self._unstored: tuple[list[Item], list[Ref]] = ([], [])  # closed by `flush_idle`, not yet stored

    def ping(self) -> bool:
        return True

    def handle(self, batch_id: int, messages: Sequence[Message], sent: Sequence[int],
               per_message: bool = False) -> IntakeResult:
        """Store the batch in one transaction (or, `per_message`, one per message, dead-lettering the
        messages that fail); `StoreRetry` is raised for the caller to retry."""
        if self._prepared is None or self._prepared.batch_id != batch_id:
            prepared_, dead_ = self._prepare(messages)
            self._prepared = _Prepared(batch_id, prepared_, dead_, *self.mapper.holds())
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
            errors = self._store_each(its, res, split=True)
            if errors:  # these records of the message cannot be stored: keep it, say why, go on
                log.error("message %s[%d]@%d: %d record(s) could not be stored", msg.topic, msg.partition,
                          msg.offset, len(errors))
                res.dead_letters.append(dead_letter(msg, "processing_error", "; ".join(errors)))
        return res

    def _store_each(self, items: list[Item], res: IntakeResult, *, split: bool) -> list[str]:
        """Store `items` in one transaction; if that fails for the records (`StoreRetry.transient`: not)
        and `split`, one transaction per item. The errors of the items that could not be stored."""
        try:
            stored = self.store.process(items)
            res.outgoing.extend(stored.outgoing)
            res.fault_times.extend(stored.fault_times)
            return []
        except Exception as exc:
            if isinstance(exc, StoreRetry) and exc.transient:  # the database's state: the worker retries
                raise
            if not split or len(items) == 1:
                log.warning("records could not be stored: %s", exc, exc_info=True)
                return [f"{type(exc).__name__}: {exc}"]
        return [e for item in items for e in self._store_each([item], res, split=False)]

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
                items = self.mapper.items(rec, msg.topic, (msg.topic, msg.partition, msg.offset))
            except Exception as exc:  # a record the pure code cannot handle: keep it, say why, go on
                log.exception("record %s of %s could not be mapped", rec.record_id, rec.node)
                dead.append(dead_letter(msg, "processing_error", f"{type(exc).__name__}: {exc}"))
                continue
            problems = [(item, problem) for item in items if (problem := bad_field(item)) is not None]
            if problems:
                log.warning("record of %s[%d]@%d set aside: %s", msg.topic, msg.partition, msg.offset,
                            problems[0][1])
                dead.append(dead_letter(msg, "bad_field", "; ".join(p for _, p in problems)))
                items = [item for item in items if all(item is not bad for bad, _ in problems)]
            if items:
                prepared.append((msg, items))
        return prepared, dead

    def flush_idle(self, idle_s: float) -> IntakeResult:
        """Store the kernel records of nodes quiet for `idle_s` seconds, and those of the nodes whose
        parsers expire (idle past `ParserBounds.node_idle_s`, or past `max_nodes`: see `ItemMapper.flush_idle`).

        If the transaction fails, the records (and the messages they release) are stored by the next call.
        """
        items, released = self._unstored
        items = items + self.mapper.flush_idle(idle_s)
        released = released + self.mapper.holds()[1]  # closing records holds no new line
        self._unstored = (items, released)
        result = self.store.process(items) if items else BatchResult()
        self._unstored = ([], [])
        return IntakeResult.of(result, released=released)

    def forget(self, partitions: Iterable[tuple[str, int]]) -> int:
        """The worker no longer reads `partitions`: drop what its open records held (see `ItemMapper.forget`)."""
        gone = set(partitions)
        items, released = self._unstored
        self._unstored = (items, [r for r in released if r[:2] not in gone])
        return self.mapper.forget(gone)

    def create_schema(self) -> None:
        self.store.create_schema()

    def sweep(self) -> list[Outgoing]:
        return self.store.sweep()

    def unsent(self, older_than_s: float) -> list[Outgoing]:
        return self.store.unsent(older_than_s)

    def mark_sent(self, ids: Sequence[int]) -> None:
        self.store.mark_sent(ids)

    def prune_sent(self, keep_s: float) -> int:
        return self.store.prune_sent(keep_s)

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
    """The dead letter of `msg`: the reason, the error, the original bytes, found now."""
    return DeadLetter(reason, error, msg.topic, msg.partition, msg.offset, msg.key, msg.value, datetime.now(UTC))


_INT_BITS = {"SmallInteger": 16, "Integer": 32, "BigInteger": 64}
_MAX_DEPTH = 64


@cache
def _columns(table: Any) -> dict[str, tuple[str, int]]:
    """Column name → ("str", most characters) or ("int", bits), from the table's SQL types."""
    out: dict[str, tuple[str, int]] = {}
    for col in table.__table__.columns:
        kind = type(col.type).__name__
        if kind in _INT_BITS:
            out[col.name] = ("int", _INT_BITS[kind])
        elif isinstance(col.type, sa.String) and col.type.length:
            out[col.name] = ("str", col.type.length)
    return out


def bad_field(item: Item) -> str | None:
    """Why `item` cannot be stored as it is, naming the field, or None: a field past the range or
    length of the column it is stored in, or anywhere in it an integer past 64 bits, a string with
    a NUL byte (PostgreSQL text cannot hold one) or a float that is not finite (nor can JSON)."""
    table: Any
    if isinstance(item, FaultItem):
        head, values, table = "fault", _attributes(item.observation), FaultEvent
    elif isinstance(item, EvidenceItem):
        head, values, table = "evidence", _attributes(item.record), EvidenceRecord
    else:
        head, values, table = f"state {item.kind}", _attributes(item), NodeState
    for name, (kind, limit) in _columns(table).items():
        value = values.get(name)
        if kind == "int" and isinstance(value, int) and not -(2 ** (limit - 1)) <= value < 2 ** (limit - 1):
            return f"{head} field {name}: {str(value)[:40]} is out of range ({limit}-bit column)"
        if kind == "str" and isinstance(value, str) and len(value) > limit:
            return f"{head} field {name}: {len(value)} characters, the column holds {limit}"
    return _bad_value(values, head)


def _attributes(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return dict(vars(obj))


def _bad_value(values: Mapping[str, Any], head: str) -> str | None:
    """The first value, at any depth, that no column or JSON document can hold."""
    stack: list[tuple[str, Any, int]] = [(f"{head} field {k}", v, 0) for k, v in values.items()]
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str):
            if "\0" in value:
                return f"{path}: holds a NUL character"
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                return f"{path}: {str(value)[:40]} is out of range (64 bits)"
        elif isinstance(value, float):
            if not math.isfinite(value):
                return f"{path}: {value} is not a finite number"
        elif depth >= _MAX_DEPTH:
            return f"{path}: nested deeper than {_MAX_DEPTH} levels"
        elif isinstance(value, Mapping):
            stack.extend((f"{path}.{str(k)[:40]}", v, depth + 1) for k, v in value.items())
            stack.extend((f"{path} key", k, depth + 1) for k in value if isinstance(k, str))
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{i}]", v, depth + 1) for i, v in enumerate(value))
        elif dataclasses.is_dataclass(value) or hasattr(value, "model_fields"):
            stack.extend((f"{path}.{k}", v, depth + 1) for k, v in _attributes(value).items())
    return None
