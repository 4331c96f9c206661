"""Node records → the items the store handles: fault observations, state snapshots, evidence.

Kernel lines go through one `KernelLogParser` per node, so records that span lines (an identity
line and its serial number, the three lines of "fallen off the bus", AER groups) are assembled as
in `xidpipe parse`. A record still open when its node goes quiet is closed by `flush_idle`.
The lines of a record still open are *held* (see `Ingest.holds`): the worker acknowledges them
in Kafka only once the record is complete and stored, so a worker that dies before that leaves
them to the next one. Records of a health signal (`models.signals`: NVML events, missing GPUs,
any signal registered there) become fault observations through the signal's own mapping.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

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
    SpoolDrops,
)
from models.pci import normalize_pci
from models.signals import observations

log = logging.getLogger(__name__)

_LINES_KEPT = 256  # lines remembered per node to map a finished record back to its first line

Ref = tuple[str, int, int]  # where a kernel line came from: topic, partition, offset


@dataclass(frozen=True, slots=True)
class StateItem:
    node: str
    record_id: str
    topic: str
    kind: str  # inventory, identity, pods, processes
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


class _Parser(KernelLogParser):
    @property
    def open_since(self) -> int | None:
        """The first line of the record still open (later lines may still change it); None if none is."""
        return self._open.record.line if self._open is not None else None


class _NodeParser:
    __slots__ = ("emitted", "last_fed", "lineno", "lines", "parser", "pending", "reported", "topic")

    def __init__(self, topic: str) -> None:
        self.parser = _Parser()
        self.lines: OrderedDict[int, KernelLine] = OrderedDict()
        self.emitted: dict[int, int] = {}
        self.lineno = 0
        self.last_fed = time.monotonic()
        self.topic = topic
        # (line number, where it came from) of the lines from the open record's first one on; the
        # first `reported` of them were reported held by `Ingest.holds`
        self.pending: deque[tuple[int, Ref]] = deque()
        self.reported = 0


class Ingest:
    """Stateful only in the per-node parsers; everything else is a pure mapping."""

    def __init__(self) -> None:
        self._parsers: dict[str, _NodeParser] = {}
        self._unreported: set[str] = set()  # nodes with held lines not yet reported by `holds`
        self._released: list[Ref] = []  # lines reported held whose record has since been closed

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
            faults = observations(record)
            if faults is not None:
                return [FaultItem(obs, topic) for obs in faults]
            log.warning("no signal maps %s records (from %s)", record.kind, record.node,
                        extra={"node": record.node, "kind": record.kind})
        return []

    def _kernel(self, line: KernelLine, topic: str, ref: Ref | None) -> list[Item]:
        np = self._parsers.get(line.node)
        if np is None:
            np = self._parsers[line.node] = _NodeParser(topic)
        np.lineno += 1
        np.lines[np.lineno] = line
        while len(np.lines) > _LINES_KEPT:
            np.lines.popitem(last=False)
        np.last_fed = time.monotonic()
        out = self._convert(np, np.parser.feed(cut_line(line.message), np.lineno))  # held to MAX_LINE_CHARS
        since = np.parser.open_since
        if ref is not None and since is not None:
            np.pending.append((np.lineno, ref))
            self._unreported.add(line.node)
        if np.pending:
            self._settle(np, since)
        return out

    def _settle(self, np: _NodeParser, since: int | None) -> None:
        """Let go of the lines before the open record (of all of them when none is open)."""
        pending = np.pending
        while pending and (since is None or pending[0][0] < since):
            _, ref = pending.popleft()
            if np.reported:
                np.reported -= 1
                self._released.append(ref)

    def holds(self) -> tuple[list[Ref], list[Ref]]:
        """Since the last call: the tracked lines now held (their record is still open, so
        acknowledging them would let a restart skip it), and the lines reported held before that are
        free now (their record was closed: it is among the items returned since)."""
        held: list[Ref] = []
        for node in self._unreported:
            np = self._parsers.get(node)
            if np is not None:
                held.extend(ref for _, ref in islice(np.pending, np.reported, None))
                np.reported = len(np.pending)
        self._unreported.clear()
        released, self._released = self._released, []
        return held, released

    def forget(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Drop the parsers of the nodes with held lines from `partitions`: whoever reads those
        partitions next starts at or before those lines. Returns how many parsers were dropped."""
        gone = set(partitions)
        nodes = [node for node, np in self._parsers.items() if any(r[:2] in gone for _, r in np.pending)]
        for node in nodes:
            del self._parsers[node]
            self._unreported.discard(node)
        self._released = [r for r in self._released if r[:2] not in gone]
        return len(nodes)

    def flush_idle(self, idle_s: float) -> list[Item]:
        """Close the records of nodes that sent no kernel line for `idle_s` seconds."""
        now = time.monotonic()
        out: list[Item] = []
        for np in self._parsers.values():
            if now - np.last_fed >= idle_s:
                out.extend(self._finish(np))
        return out

    def flush_all(self) -> list[Item]:
        out: list[Item] = []
        for np in self._parsers.values():
            out.extend(self._finish(np))
        return out

    def _finish(self, np: _NodeParser) -> list[Item]:
        out = self._convert(np, np.parser.finish())
        if np.pending:
            self._settle(np, None)
        return out

    def _convert(self, np: _NodeParser, records: list[FaultRecord]) -> list[Item]:
        out: list[Item] = []
        for rec in records:
            line = np.lines.get(rec.line)
            if line is None:
                continue  # its first line is long gone: cannot be attributed to a record id
            index = np.emitted.get(rec.line, 0)
            np.emitted[rec.line] = index + 1
            if len(np.emitted) > _LINES_KEPT:
                np.emitted.pop(next(iter(np.emitted)))
            if rec.kind == "gpu_identity":
                if rec.pci:
                    at = record_time(rec, line).at
                    out.append(StateItem(line.node, f"identity:{line.record_id}:{index}", np.topic, "identity", at,
                                         {"pci": normalize_pci(rec.pci), "uuid": rec.gpu_uuid, "serial": rec.serial}))
                continue
            out.append(FaultItem(observation_from_kernel(rec, line, index), np.topic))
        return out

