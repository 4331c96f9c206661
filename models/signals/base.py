"""What a health signal is to the pipeline, and the registry the stream reads.

A signal is a record kind a node agent publishes and a pure mapping from one such record to the
fault observations it reports (none, one or several). Registering a signal registers its record
kind on the wire (`models.node_records.register_record`) and its mapping for the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from models.incidents import FaultObservation
from models.node_records import NodeRecordBase, kind_of, register_record, unregister_record

R = TypeVar("R", bound=NodeRecordBase)


@dataclass(frozen=True, slots=True)
class Signal(Generic[R]):
    """A health signal: the record its sensor publishes, on which topic, and the faults it reports."""

    record: type[R]
    topic: str  # one of `models.node_records.NODE_TOPICS`
    observe: Callable[[R], Sequence[FaultObservation]]  # pure: no I/O, no clock
    droppable: bool = False  # a periodic snapshot a full agent spool may drop; fault reports never are

    @property
    def kind(self) -> str:
        return kind_of(self.record)


_SIGNALS: dict[str, Signal[Any]] = {}


def register(signal: Signal[R]) -> Signal[R]:
    """Add a signal: its records become decodable on its topic and the stream maps them with it."""
    register_record(signal.record, signal.topic, droppable=signal.droppable)
    existing = _SIGNALS.get(signal.kind)
    if existing is not None and existing != signal:
        raise ValueError(f"signal {signal.kind!r} is already registered")
    _SIGNALS[signal.kind] = signal
    return signal


def unregister(kind: str) -> None:
    """Remove a signal and its record kind (tests that register one of their own)."""
    if _SIGNALS.pop(kind, None) is not None:
        unregister_record(kind)


def signal_for(kind: str) -> Signal[Any] | None:
    return _SIGNALS.get(kind)


def observations(record: NodeRecordBase) -> tuple[FaultObservation, ...] | None:
    """The faults a record reports, by its signal's mapping; None when no signal is registered for its kind."""
    signal = _SIGNALS.get(record.kind)
    return None if signal is None else tuple(signal.observe(record))
