"""The node records a recorded cluster would have produced, in event-time order, read as a stream.

Each `<node>.log` is read the way the node agent reads a log file (`agents.kernlog.filetail.FileSource`
with the agent's pre-filter, `agents.kernlog.prefilter.PreFilter`): only GPU-relevant lines become
`KernelLine` records, with the record id, offset and content hash the agent would give them. The
nodes' records and the state file's are merged by event time; a node's own records keep their
order. Each log is read once, on its own, into a scratch spool of its kept records, so memory does
not grow with the number of lines, and the merge holds one record per node. A line whose own
stamp gives no wall-clock time (raw `dmesg` uptimes) is placed by its uptime and the boot time the
node's recorded inventory names (`boot_time`), as the agent given `--boot-time` does; without one it
takes its node's previous time, or the time of the replay when the node has none yet.
"""

from __future__ import annotations

import heapq
import json
import resource
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path

from agents.kernlog.base import SourceLine
from agents.kernlog.filetail import FileSource
from agents.kernlog.prefilter import DEFAULT_FAULT_PATTERNS, DEFAULT_KEEP_PATTERNS, PreFilter
from models.event_time import boot_times
from models.incidents import parse_time
from models.kernlog.clock import from_epoch_us
from models.kernlog.prefix import parse_prefix
from models.node_records import KernelLine, NodeRecord
from xidpipe.replay.layout import ClusterDir, ReplayInputError, iter_state, state_records

Entry = tuple[datetime, int, NodeRecord]
_HEAD = 96  # characters of a line that hold its stamp


def line_time(message: str, now: datetime) -> datetime | None:
    """The wall-clock time a kernel line's own stamp gives (journal JSON, syslog, dmesg -T, ISO), if any."""
    if message[:1] == "{":
        try:
            entry = json.loads(message)
        except (ValueError, RecursionError):
            return None
        return from_epoch_us(entry.get("__REALTIME_TIMESTAMP")) if isinstance(entry, dict) else None
    return parse_time(parse_prefix(message[:_HEAD], None, now).timestamp)


def kernel_line(node: str, line: SourceLine, fault: bool) -> KernelLine:
    """The record the node agent publishes for a kept line: every field the source line and the
    record share (the source's resume cursor is no field of the record), its journald cursor as `cursor`."""
    shared = {f.name: getattr(line, f.name) for f in fields(line)
              if f.name in KernelLine.model_fields and f.name != "cursor"}
    return KernelLine(node=node, fault=fault, cursor=line.journal_cursor, **shared)


class NodeLog:
    """One node's kernel log as merge entries (time, 1, KernelLine); counts the lines it read."""

    def __init__(self, node: str, path: Path, prefilter: PreFilter, now: datetime,
                 boot_time: datetime | None = None) -> None:
        self.node = node
        self.path = path
        self.prefilter = prefilter
        self.now = now
        self.boot_time = boot_time
        self.lines_read = 0
        self.lines_kept = 0

    def entries(self) -> Iterator[Entry]:
        source = FileSource(self.path, None, follow=False, line_filter=lambda m: self.prefilter(m).keep,
                            block_filter=self.prefilter.may_match, boot_time=self.boot_time)
        last: datetime | None = None
        try:
            for item in source.items():
                if isinstance(item, SourceLine):
                    self.lines_read += 1
                    self.lines_kept += 1
                    at = getattr(item, "event_at", None) or line_time(item.message, self.now) or last or self.now
                    last = at
                    yield at, 1, kernel_line(self.node, item, self.prefilter(item.message).fault)
                elif item is not None and hasattr(item, "messages"):
                    self.lines_read += len(item.messages)
        except OSError as exc:
            raise ReplayInputError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        finally:
            source.close()


def _allow_open_files(needed: int) -> None:
    """Every node's spool is open at once during the merge: raise the soft limit on open files if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            raise ReplayInputError(f"{needed} node logs need {want} open files; the limit is {hard} (ulimit -n)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


class ClusterRecords:
    """The merged record stream of a recorded cluster; `lines_read`/`lines_kept` once consumed."""

    def __init__(self, cluster: ClusterDir, now: datetime | None = None,
                 keep_patterns: Iterable[str] = DEFAULT_KEEP_PATTERNS,
                 fault_patterns: Iterable[str] = DEFAULT_FAULT_PATTERNS) -> None:
        self.cluster = cluster
        self.now = now or datetime.now(UTC)
        self.prefilter = PreFilter(list(keep_patterns), list(fault_patterns))
        self.state = state_records(cluster)
        booted = boot_times(self.state)
        self.logs = [NodeLog(node, path, self.prefilter, self.now, booted.get(node))
                     for node, path in sorted(cluster.logs.items())]

    @property
    def lines_read(self) -> int:
        return sum(n.lines_read for n in self.logs)

    @property
    def lines_kept(self) -> int:
        return sum(n.lines_kept for n in self.logs)

    def __iter__(self) -> Iterator[NodeRecord]:
        """Each log is read once, alone, its kept records spooled to a scratch file (a twentieth of the
        log, typically); the merge then holds one record and one small read buffer per node."""
        with tempfile.TemporaryDirectory(prefix="xidpipe-replay-spool-") as scratch:
            spools = [p for n, log in enumerate(self.logs) if (p := _spool(log, Path(scratch) / f"{n}.jsonl"))]
            _allow_open_files(len(spools))
            streams: list[Iterator[Entry]] = [iter_state(self.state), *(_spooled(p) for p in spools)]
            for _, _, rec in heapq.merge(*streams, key=lambda e: (e[0], e[1])):
                yield rec


def _spool(log: NodeLog, path: Path) -> Path | None:
    """Write `log`'s entries to `path` (time, tab, record JSON per line); None when it kept no line."""
    with open(path, "w", encoding="utf-8") as out:
        for at, _, rec in log.entries():
            out.write(f"{at.isoformat()}\t{rec.model_dump_json()}\n")
    return path if log.lines_kept else None


def _spooled(path: Path) -> Iterator[Entry]:
    with open(path, encoding="utf-8", buffering=1 << 14) as fh:
        for line in fh:
            at, _, body = line.partition("\t")
            yield datetime.fromisoformat(at), 1, KernelLine.model_validate_json(body)
