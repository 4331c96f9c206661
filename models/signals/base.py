"""What a health signal is to the pipeline, and the registry the stream reads.

A signal is a record kind a node agent publishes and a pure mapping from one such record to the
fault observations it reports (none, one or several). A signal whose decision has thresholds
(`models.stream_policy.HealthPolicy`: a rate, a window, a grace period) maps its records with the
stream's policy: its `decide` is called instead of `observe`. Registering a signal registers its
record kind on the wire (`models.node_records.register_record`) and its mapping for the stream.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from models.incidents import FaultObservation
from models.node_records import NodeRecordBase, kind_of, register_record, unregister_record
from models.stream_policy import PipelinePolicy

R = TypeVar("R", bound=NodeRecordBase)


@dataclass(frozen=True, slots=True)
class Signal(Generic[R]):
    """A health signal: the record its sensor publishes, on which topic, and the faults it reports."""

    record: type[R]
    topic: str  # one of `models.node_records.NODE_TOPICS`
    observe: Callable[[R], Sequence[FaultObservation]]  # pure: no I/O, no clock
    droppable: bool = False  # a periodic snapshot a full agent spool may drop; fault reports never are
    # pure, with the stream's policy (its thresholds and windows); when set, the stream calls it, not `observe`
    decide: Callable[[R, PipelinePolicy], Sequence[FaultObservation]] | None = None

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


def decided(record: type[R], topic: str, decide: Callable[[R, PipelinePolicy], Sequence[FaultObservation]],
            *, droppable: bool = False) -> Signal[R]:
    """A signal whose mapping takes the stream's policy; `observe` alone applies the default policy."""
    default = PipelinePolicy()
    return Signal(record, topic, lambda rec: decide(rec, default), droppable, decide)


def observations(record: NodeRecordBase, policy: PipelinePolicy | None = None) -> tuple[FaultObservation, ...] | None:
    """The faults a record reports, by its signal's mapping (a deciding signal's with `policy`, the
    stream's; the defaults when None); None when no signal is registered for its kind."""
    signal = _SIGNALS.get(record.kind)
    if signal is None:
        return None
    if signal.decide is not None:
        return tuple(signal.decide(record, policy or PipelinePolicy()))
    return tuple(signal.observe(record))
