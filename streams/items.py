"""Node records → the items the store handles: fault observations, state snapshots, evidence.

Kernel lines go through one `KernelLogParser` per node, so records that span lines (an identity
line and its serial number, the three lines of "fallen off the bus", AER groups) are assembled as
in `xidpipe parse`. A record still open when its node goes quiet is closed by `flush_idle`.
The lines of a record still open are *held* (see `ItemMapper.holds`): the worker acknowledges them
in Kafka only once the record is complete and stored, so a worker that dies before that leaves
them to the next one. Whoever reads a partition next starts at its committed offset and parses
every line from there, so that offset must never stand inside a record (`_PartitionHolds`): a
stored record whose lines surround another node's open record stays held with it, else the next
reader would parse its later lines as a record of their own. Records of a health signal
(`models.signals`: NVML events, missing GPUs, any signal registered there) become fault
observations through the signal's own mapping.
"""

from __future__ import annotations

import logging
import math
import time
from bisect import bisect_left, insort
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cachetools import LRUCache

from models.event_time import record_time
from models.incidents import FaultObservation, observation_from_kernel
from models.kernlog.lines import cut_line
from models.kernlog.parser import KernelLogParser
from models.kernlog.record import FaultRecord
from models.node_records import (
    Evidence,
    GpuInventory,
    GpuProcesses,
    KernelGap,
    KernelLine,
    NodeRecord,
    PodAssignments,
    PodWorkloads,
    SpoolDrops,
)
from models.pci import normalize_pci
from models.signals import observations
from models.stream_policy import PipelinePolicy

log = logging.getLogger(__name__)

_PREFIX_CACHE_SIZE = 64  # line prefixes (timestamps) parsed per node and remembered: a storm repeats a few

Ref = tuple[str, int, int]  # where a kernel line came from: topic, partition, offset


@dataclass(frozen=True, slots=True)
class StateItem:
    node: str
    record_id: str
    topic: str
    kind: str  # inventory, identity, pods, processes, workloads
    valid_from: datetime
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class FaultItem:
    observation: FaultObservation
    topic: str


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    record: Evidence
    topic: str


Item = StateItem | FaultItem | EvidenceItem


@dataclass(frozen=True, slots=True)
class ParserBounds:
    """How much kernel-log state the intake keeps per node, and for how many nodes (`ItemMapper`)."""

    max_nodes: int = 20_000  # parsers kept; past it the least recently fed are closed and dropped
    node_idle_s: float = 900.0  # a node without a kernel line for this long: its parser is closed and dropped
    remembered_nodes: int = 100_000  # what dropped parsers knew of their GPUs (`_NodeMemory`), kept for their return


@dataclass(frozen=True, slots=True)
class _NodeMemory:
    """What a node's parser learnt from earlier lines and needs for later ones: the PCI addresses of
    its GPUs and of their root ports (an AER report names the port), and each device's count of
    correctable AER reports. It outlives the parser, so a node that comes back parses as before."""

    known_gpus: frozenset[str]
    gpu_root_ports: frozenset[str]
    correctable: tuple[tuple[str, int], ...]


class _Parser(KernelLogParser):
    def __init__(self, messages: dict[str, Any], memory: _NodeMemory | None) -> None:
        super().__init__()
        # Recognising a message is a pure function of its text: one cache serves every node's parser
        # (the parser keeps it to its size). A line's prefix depends on the parser's clock: a few per node.
        self._message_cache = messages
        self._prefix_cache = LRUCache(maxsize=_PREFIX_CACHE_SIZE)  # type: ignore[assignment]
        if memory is not None:
            self._known_gpus = set(memory.known_gpus)
            self._gpu_root_ports = set(memory.gpu_root_ports)
            self._correctable = dict(memory.correctable)

    @property
    def open_since(self) -> int | None:
        """The first line of the record still open (later lines may still change it); None if none is."""
        return self._open.record.line if self._open is not None else None

    def memory(self) -> _NodeMemory | None:
        if not (self._known_gpus or self._gpu_root_ports or self._correctable):
            return None
        return _NodeMemory(frozenset(self._known_gpus), frozenset(self._gpu_root_ports),
                           tuple(self._correctable.items()))


class _NodeParser:
    __slots__ = ("emitted", "last_fed", "lineno", "lines", "parser", "partition", "pending", "topic")

    def __init__(self, topic: str, messages: dict[str, Any], memory: _NodeMemory | None) -> None:
        self.parser = _Parser(messages, memory)
        # The lines a record may still name as its first: the open record's first line, and while it is
        # fed, the current one. A record's first line is one of them (the parser closes the open record
        # or makes one of the current line), so no other line is kept.
        self.lines: dict[int, KernelLine] = {}
        self.emitted: dict[int, int] = {}  # per line kept: how many records were made of it so far
        self.lineno = 0
        self.last_fed = time.monotonic()
        self.topic = topic
        # (line number, where it came from) of the lines from the open record's first one on
        self.pending: deque[tuple[int, Ref]] = deque()
        self.partition: tuple[str, int] | None = None  # where its tracked lines come from

    def keep_open_line(self) -> None:
        """Forget every line but the open record's first."""
        since = self.parser.open_since
        first = self.lines.get(since) if since is not None else None
        if len(self.lines) == (first is not None):
            return
        count = self.emitted.get(since) if since is not None else None
        self.lines.clear()
        self.emitted.clear()
        if since is not None and first is not None:
            self.lines[since] = first
            if count is not None:
                self.emitted[since] = count


@dataclass(slots=True)
class _Span:
    """The lines of a stored record (and of the node's other lines among them), by offset."""

    first: int
    last: int
    refs: list[Ref]


@dataclass(slots=True)
class _PartitionHolds:
    """One partition's kernel lines that its committed offset must not pass yet.

    The committed offset stops at the first held line (`streams.committer.Acks`), and whoever reads the
    partition next parses every line from there, so it must never stand between a record's first and
    last line. The lines of open records are held (`heads`: per node, the offset of its open record's
    first line). A stored record stays tracked (`spans`) until the committed offset may pass it, and
    its lines are held while the first held line would fall inside it: then the committed offset
    stops at its first line, and the next reader parses it whole again (the store drops the
    duplicate) instead of its later lines alone.
    """

    heads: dict[str, int] = field(default_factory=dict)
    spans: list[_Span] = field(default_factory=list)  # by first offset
    reported: set[Ref] = field(default_factory=set)  # lines reported held, not released since

    def boundary(self) -> float:
        """Where the committed offset may go: the first line of the earliest open record, moved back
        to the first line of every stored record it would cut (none open: anywhere)."""
        if not self.heads:
            return math.inf
        bound = min(self.heads.values())
        for span in reversed(self.spans[:bisect_left(self.spans, bound, key=lambda sp: sp.first)]):
            if span.last >= bound:  # spans in descending first line: a single pass finds them all
                bound = span.first
        return bound

    def settle(self) -> tuple[list[Ref], list[Ref]]:
        """(lines held now, lines released now): records wholly before the boundary are released, the
        ones it falls inside are held."""
        bound = self.boundary()
        before = bisect_left(self.spans, bound, key=lambda sp: sp.first)
        held: list[Ref] = []
        released: list[Ref] = []
        cut: list[_Span] = []
        for span in self.spans[:before]:
            if span.last < bound:
                released.extend(r for r in span.refs if r in self.reported)
            else:
                held.extend(r for r in span.refs if r not in self.reported)
                cut.append(span)
        self.spans[:before] = cut
        self.reported.difference_update(released)
        self.reported.update(held)
        return held, released


@dataclass(slots=True)
class _Expiry:
    """Parsers dropped (a node idle past `ParserBounds.node_idle_s`, or past `max_nodes`) since the start."""

    idle: int = 0
    over_size: int = 0
    records_closed: int = 0  # open records the drop closed (and handed on, like `flush_idle`'s)


class ItemMapper:
    """Node records in, store items out. Stateful only in the per-node parsers (bounded:
    `ParserBounds`) and the lines they hold; everything else is a pure mapping."""

    def __init__(self, bounds: ParserBounds | None = None, policy: PipelinePolicy | None = None) -> None:
        self.bounds = bounds or ParserBounds()
        self.policy = policy or PipelinePolicy()  # a health signal's thresholds (`models.signals.observations`)
        self._parsers: OrderedDict[str, _NodeParser] = OrderedDict()  # least recently fed first
        self._unreported: set[str] = set()  # nodes with open records' lines not yet reported by `holds`
        self._partitions: dict[tuple[str, int], _PartitionHolds] = {}
        self._touched: set[tuple[str, int]] = set()  # partitions whose holds changed since `holds`
        self._messages: dict[str, Any] = {}  # recognised message texts, shared by the parsers
        self._memory: LRUCache[str, _NodeMemory] = LRUCache(maxsize=self.bounds.remembered_nodes)
        self.expired = _Expiry()

    @property
    def nodes(self) -> int:
        """Nodes with a parser now."""
        return len(self._parsers)

    def items(self, record: NodeRecord, topic: str, ref: Ref | None = None) -> list[Item]:
        """The items of one record; `ref` (where a kernel line came from) makes `holds` track its line."""
        if isinstance(record, KernelLine):
            return self._kernel(record, topic, ref)
        if isinstance(record, GpuInventory):
            return [StateItem(record.node, record.record_id, topic, "inventory", record.emitted_at,
                              record.model_dump(mode="json"))]
        if isinstance(record, PodAssignments):
            return [StateItem(record.node, record.record_id, topic, "pods", record.changed_at,
                              record.model_dump(mode="json"))]
        if isinstance(record, PodWorkloads):  # the GPU pods' owners, from the agent's workloads sensor
            return [StateItem(record.node, record.record_id, topic, "workloads", record.changed_at,
                              record.model_dump(mode="json"))]
        if isinstance(record, GpuProcesses):
            return [StateItem(record.node, record.record_id, topic, "processes", record.emitted_at,
                              record.model_dump(mode="json"))]
        if isinstance(record, Evidence):
            return [EvidenceItem(record, topic)]
        if isinstance(record, KernelGap):
            log.warning("kernel log gap on %s: %d records lost (%s)", record.node, record.lost, record.reason,
                        extra={"node": record.node, "lost": record.lost, "reason": record.reason})
        elif isinstance(record, SpoolDrops):
            log.warning("node agent on %s dropped %d spooled records", record.node, record.dropped_since_last,
                        extra={"node": record.node})
        else:
            faults = observations(record, self.policy)
            if faults is not None:
                return [FaultItem(obs, topic) for obs in faults]
            log.warning("no signal maps %s records (from %s)", record.kind, record.node,
                        extra={"node": record.node, "kind": record.kind})
        return []

    def _kernel(self, line: KernelLine, topic: str, ref: Ref | None) -> list[Item]:
        np = self._parsers.get(line.node)
        if np is None:
            np = self._parsers[line.node] = _NodeParser(topic, self._messages, self._memory.pop(line.node, None))
            if len(self._parsers) > self.bounds.max_nodes:
                self._drop_closed_oldest()
        else:
            self._parsers.move_to_end(line.node)
        np.lineno += 1
        np.lines[np.lineno] = line
        np.last_fed = time.monotonic()
        records = np.parser.feed(cut_line(line.message), np.lineno)  # held to MAX_LINE_CHARS
        out = self._convert(np, records)
        np.keep_open_line()
        since = np.parser.open_since
        if ref is not None:
            np.partition = ref[:2]
            if since is not None:
                np.pending.append((np.lineno, ref))
                self._unreported.add(line.node)
        if np.pending:
            end = max((r.line_end or r.line for r in records if r.line < np.lineno), default=None)
            # The line that closed a record is one of its own only when the record ends on it.
            self._settle(line.node, np, since, end, ref if end == np.lineno and since != np.lineno else None)
        return out

    def _drop_closed_oldest(self) -> None:
        """Past `max_nodes`: drop the least recently fed parser if it holds no open record (one that
        does is closed, stored and dropped by the next `flush_idle`)."""
        node, oldest = next(iter(self._parsers.items()))
        if oldest.parser.open_since is None and not oldest.pending:
            self._drop(node, oldest)
            self.expired.over_size += 1

    def _drop(self, node: str, np: _NodeParser) -> None:
        del self._parsers[node]
        self._unreported.discard(node)
        memory = np.parser.memory()
        if memory is not None:
            self._memory[node] = memory

    def _settle(self, node: str, np: _NodeParser, since: int | None, end: int | None,
                closing: Ref | None = None) -> None:
        """Hand the lines before the open record (all of them when none is open) to their partition's
        holds as the span of the record just stored: from its first line to its last (`end`, a line
        number; `closing`: the line fed now, when the record ends on it). The node's later lines
        among them belong to no record: the committed offset may stand between them."""
        pending = np.pending
        popped: list[tuple[int, Ref]] = []
        while pending and (since is None or pending[0][0] < since):
            popped.append(pending.popleft())
        if popped:
            if closing is not None and closing[:2] == popped[-1][1][:2]:
                popped.append((np.lineno, closing))
            for key in dict.fromkeys(r[:2] for _, r in popped):
                lines = [(n, r) for n, r in popped if r[:2] == key]
                inside = [r[2] for n, r in lines if end is not None and n <= end]
                first = lines[0][1][2]
                span = _Span(first, inside[-1] if inside else first, [r for _, r in lines])
                insort(self._holds(key).spans, span, key=lambda sp: sp.first)
                self._touched.add(key)
        if np.partition is not None:
            heads = self._holds(np.partition).heads
            if pending:
                heads[node] = pending[0][1][2]
            else:
                heads.pop(node, None)
            self._touched.add(np.partition)

    def _holds(self, key: tuple[str, int]) -> _PartitionHolds:
        holds = self._partitions.get(key)
        if holds is None:
            holds = self._partitions[key] = _PartitionHolds()
        return holds

    def holds(self) -> tuple[list[Ref], list[Ref]]:
        """Since the last call: the tracked lines now held (their record is still open, so
        acknowledging them would let a restart skip it, or the committed offset would stand inside
        their stored record: see `_PartitionHolds`), and the lines reported held before that are
        free now (their record is among the items returned since, and the committed offset may pass it)."""
        held: list[Ref] = []
        released: list[Ref] = []
        for node in self._unreported:
            np = self._parsers.get(node)
            if np is None:
                continue
            for _, ref in np.pending:
                reported = self._holds(ref[:2]).reported
                if ref not in reported:
                    reported.add(ref)
                    held.append(ref)
        self._unreported.clear()
        for key in self._touched:
            part = self._partitions.get(key)
            if part is None:
                continue
            now_held, now_released = part.settle()
            held.extend(now_held)
            released.extend(now_released)
            if not (part.heads or part.spans or part.reported):
                del self._partitions[key]
        self._touched.clear()
        return held, released

    def forget(self, partitions: Iterable[tuple[str, int]]) -> int:
        """The worker no longer reads `partitions`: drop the parsers of their nodes (whoever reads a
        partition next starts at its committed offset, before every line of an open record or of a
        record the offset would cut, and parses them again) and what they held. Returns how many
        parsers were dropped."""
        gone = set(partitions)
        nodes = [(node, np) for node, np in self._parsers.items() if np.partition in gone]
        for node, np in nodes:
            self._drop(node, np)
        for key in gone:
            self._partitions.pop(key, None)
            self._touched.discard(key)
        return len(nodes)

    def flush_idle(self, idle_s: float) -> list[Item]:
        """Close the records of nodes that sent no kernel line for `idle_s` seconds; then drop the
        parsers of nodes idle for `ParserBounds.node_idle_s` and of the least recently fed nodes past
        `max_nodes`, closing their records first: the items returned hold every record closed, and
        `holds` reports their lines released."""
        now = time.monotonic()
        out: list[Item] = []
        for node, np in self._parsers.items():
            if now - np.last_fed >= idle_s:
                out.extend(self._finish(node, np))
        over = len(self._parsers) - self.bounds.max_nodes
        while self._parsers:
            node, np = next(iter(self._parsers.items()))
            idle = now - np.last_fed >= self.bounds.node_idle_s
            if not idle and over <= 0:
                break
            closed = self._finish(node, np)
            self.expired.records_closed += len(closed)
            out.extend(closed)
            self._drop(node, np)
            over -= 1
            if idle:
                self.expired.idle += 1
            else:
                self.expired.over_size += 1
        return out

    def flush_all(self) -> list[Item]:
        out: list[Item] = []
        for node, np in self._parsers.items():
            out.extend(self._finish(node, np))
        return out

    def _finish(self, node: str, np: _NodeParser) -> list[Item]:
        records = np.parser.finish()
        out = self._convert(np, records)
        np.keep_open_line()
        if np.pending:
            self._settle(node, np, None, max((r.line_end or r.line for r in records), default=None))
        return out

    def _convert(self, np: _NodeParser, records: list[FaultRecord]) -> list[Item]:
        out: list[Item] = []
        for rec in records:
            line = np.lines.get(rec.line)
            if line is None:
                continue  # its first line is long gone: cannot be attributed to a record id
            index = np.emitted.get(rec.line, 0)
            np.emitted[rec.line] = index + 1
            if rec.kind == "gpu_identity":
                if rec.pci:
                    at = record_time(rec, line).at
                    out.append(StateItem(line.node, f"identity:{line.record_id}:{index}", np.topic, "identity", at,
                                         {"pci": normalize_pci(rec.pci), "uuid": rec.gpu_uuid, "serial": rec.serial}))
                continue
            out.append(FaultItem(observation_from_kernel(rec, line, index), np.topic))
        return out

