"""A bounded, ordered on-disk spool between the sources and Kafka (a write-ahead log).

Every record is appended here first and numbered; the publisher reads in order and, once Kafka
acknowledged through number N, calls `ack(N)`, which persists the position and deletes segments
that are fully acknowledged. When the spool holds more than `max_bytes`, non-fault records are
dropped (and counted); fault records may use `fault_reserve_bytes` more, and beyond that the
append blocks (back-pressure on the reader) rather than drop a fault.

Segment files hold one JSON object per line:
`{"n": number, "t": topic, "k": key, "f": fault, "s": source, "c": cursor, "id": record id, "v": value}`.

A line that does not decode (a flipped bit, a block of zeros after a power loss) is moved aside into
`corrupt/` (one file per record, named by segment and offset) and counted in
`xidpipe_agent_spool_corrupt_total`; the records around it are published as usual. Opening the spool
checks every segment and takes corrupt lines out of it; a line that goes bad later is moved aside
when the publisher reads it. A torn last line (a crash mid-write) is cut off on open.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.metrics import Metrics
from agents.statefile import read_json, write_json_atomic

log = logging.getLogger(__name__)

SEGMENT_BYTES = 4 * 1024 * 1024
STATE_FILE = "spool-state.json"
NUMBER_MAX = 2**63 - 1  # record numbers and the acknowledged position: a signed 64-bit counter, never reached
CORRUPT_DIR = "corrupt"


class CorruptRecord(ValueError):
    """A spool line that is not a record."""


def _is_number(value: object) -> bool:
    """A record number or position: an integer (not a bool or float) from 0 to NUMBER_MAX."""
    return type(value) is int and 0 <= value <= NUMBER_MAX


@dataclass(frozen=True, slots=True)
class SpoolEntry:
    number: int
    topic: str
    key: str
    value: str
    fault: bool
    record_id: str
    source: str | None = None
    cursor: dict[str, Any] | None = None

    def encode(self) -> bytes:
        return (
            json.dumps(
                {"n": self.number, "t": self.topic, "k": self.key, "f": self.fault, "s": self.source,
                 "c": self.cursor, "id": self.record_id, "v": self.value},
                separators=(",", ":"),
            )
            + "\n"
        ).encode()

    @staticmethod
    def decode(line: bytes) -> SpoolEntry:
        """The record on one line; CorruptRecord when the line is not one (zeros a crash left in
        front of a record are skipped)."""
        try:
            d = json.loads(line.lstrip(b"\0"))
            entry = SpoolEntry(d["n"], d["t"], d["k"], d["v"], d["f"], d["id"], d.get("s"), d.get("c"))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CorruptRecord(f"{type(exc).__name__}: {exc}") from exc
        text = (entry.topic, entry.key, entry.value, entry.record_id)
        if (not _is_number(entry.number) or entry.number < 1 or not all(isinstance(v, str) for v in text)
                or not isinstance(entry.fault, bool) or not isinstance(entry.source, str | None)
                or not isinstance(entry.cursor, dict | None)):
            raise CorruptRecord("a field has the wrong type")
        return entry


class Spool:
    def __init__(
        self,
        directory: Path,
        metrics: Metrics,
        *,
        max_bytes: int = 256 * 1024 * 1024,
        fault_reserve_bytes: int = 16 * 1024 * 1024,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self._dir = directory
        self._dir.mkdir(parents=True, exist_ok=True)
        self._metrics = metrics
        self._max = max_bytes
        self._reserve = fault_reserve_bytes
        self._segment_bytes = segment_bytes
        self._cond = threading.Condition()
        state = read_json(self._dir / STATE_FILE) or {}
        state = state if isinstance(state, dict) else {}
        acked, written_at = state.get("acked", 0), state.get("written_at")
        if not _is_number(acked):  # not believed: the records are sent again, never skipped
            log.warning("spool state names no acknowledged position; resending", extra={"acked": str(acked)[:40]})
            acked = 0
        self.acked: int = int(acked)
        self.state_written_at: float | None = (
            float(written_at) if isinstance(written_at, int | float) and not isinstance(written_at, bool)
            and math.isfinite(written_at) else None)
        self.dropped_total = 0
        self._dropped_unreported = 0
        self._closed = False
        self._set_aside: set[tuple[int, int]] = set()  # (segment, offset) of lines moved aside
        # segment number -> (size, last number in it)
        self._segments: dict[int, list[int]] = {}
        self._last_number = self.acked
        for path in sorted(self._dir.glob("*.seg")):
            seg = int(path.stem)
            size, last = self._recover_segment(path)
            self._segments[seg] = [size, last]
            self._last_number = max(self._last_number, last)
        if not self._segments:
            self._segments[1] = [0, self._last_number]
        self.last_number_at_open = self._last_number
        self._write_seg = max(self._segments)
        self._fd = os.open(self._seg_path(self._write_seg), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        # reader position (and the open segment file it reads)
        self._rfile: Any = None
        self._rfile_seg = -1
        self._rseg = min(self._segments)
        self._rpos = 0
        self._rlast = self.acked
        self._update_gauges()

    # --- internals ------------------------------------------------------------------------
    def _seg_path(self, seg: int) -> Path:
        return self._dir / f"{seg:010d}.seg"

    def _recover_segment(self, path: Path) -> tuple[int, int]:
        """Cut a torn tail, move corrupt lines aside; (size, last record number) of what is left."""
        data = path.read_bytes()
        good = data.rfind(b"\n") + 1
        if good != len(data):
            log.warning("dropping a torn spool tail", extra={"segment": path.name, "bytes": len(data) - good})
            with open(path, "r+b") as fh:
                fh.truncate(good)
            data = data[:good]
        seg = int(path.stem)
        kept: list[bytes] = []
        last = offset = 0
        for line in data.splitlines(keepends=True):
            try:
                last = max(last, SpoolEntry.decode(line).number)
                kept.append(line)
            except CorruptRecord as exc:
                self._move_aside(seg, offset, line, str(exc))
            offset += len(line)
        if len(kept) != len(data.splitlines()):
            clean = b"".join(kept)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(clean)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            good = len(clean)
        return good, last

    def _move_aside(self, seg: int, offset: int, line: bytes, reason: str) -> None:
        """Keep a corrupt line's bytes under corrupt/ for a human, count it, and go on without it."""
        if (seg, offset) in self._set_aside:
            return
        self._set_aside.add((seg, offset))
        aside = self._dir / CORRUPT_DIR
        aside.mkdir(exist_ok=True)
        name = aside / f"{seg:010d}-{offset:012d}.rec"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self._metrics.inc("xidpipe_agent_spool_corrupt_total")
        log.error("corrupt spool record moved aside", extra={"segment": seg, "offset": offset, "bytes": len(line),
                                                              "reason": reason[:200], "file": str(name)})

    @property
    def size(self) -> int:
        return sum(s for s, _ in self._segments.values())

    def _update_gauges(self) -> None:
        self._metrics.set("xidpipe_agent_spool_bytes", self.size)
        self._metrics.set("xidpipe_agent_spool_pending", self._last_number - self.acked)

    # --- writer side ----------------------------------------------------------------------
    def append(
        self,
        topic: str,
        key: str,
        value: str,
        *,
        fault: bool,
        record_id: str,
        source: str | None = None,
        cursor: dict[str, Any] | None = None,
        stop: threading.Event | None = None,
    ) -> int | None:
        """Append a record; its number, or None when dropped (non-fault, spool full)."""
        with self._cond:
            warned = False
            while True:
                size = self.size
                if size < self._max:
                    break
                if not fault:
                    self.dropped_total += 1
                    self._dropped_unreported += 1
                    self._metrics.inc("xidpipe_agent_spool_dropped_total")
                    return None
                if size < self._max + self._reserve:
                    break
                if not warned:
                    log.error("spool full even for fault records: pausing the reader until Kafka drains it")
                    warned = True
                if stop is not None and stop.is_set():
                    break  # shutting down: write anyway rather than lose a fault
                self._cond.wait(0.5)
            number = self._last_number + 1
            entry = SpoolEntry(number, topic, key, value, fault, record_id, source, cursor)
            data = entry.encode()
            if self._segments[self._write_seg][0] >= self._segment_bytes:
                os.close(self._fd)
                self._write_seg += 1
                self._segments[self._write_seg] = [0, self._last_number]
                self._fd = os.open(self._seg_path(self._write_seg), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                   0o600)
            os.write(self._fd, data)
            self._segments[self._write_seg][0] += len(data)
            self._segments[self._write_seg][1] = number
            self._last_number = number
            self._metrics.inc("xidpipe_agent_records_spooled_total")
            self._update_gauges()
            self._cond.notify_all()
            return number

    def take_drop_report(self) -> tuple[int, int]:
        """(dropped in total, dropped since the last report) and reset the latter."""
        with self._cond:
            since, self._dropped_unreported = self._dropped_unreported, 0
            return self.dropped_total, since

    def sync(self) -> None:
        with self._cond:
            os.fsync(self._fd)

    # --- reader side ----------------------------------------------------------------------
    @property
    def last_number(self) -> int:
        with self._cond:
            return self._last_number

    def pending_count(self) -> int:
        with self._cond:
            return self._last_number - self.acked

    def wait_for_data(self, after: int, timeout: float) -> bool:
        with self._cond:
            if self._last_number > after:
                return True
            self._cond.wait(timeout)
            return self._last_number > after

    def notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def rewind(self) -> None:
        """Read again from the first unacknowledged record (after a producer reset)."""
        with self._cond:
            self._rseg = min(self._segments)
            self._rpos = 0
            self._rlast = self.acked

    def read(self, limit: int) -> list[SpoolEntry]:
        """Up to `limit` records after the last one read, in order."""
        out: list[SpoolEntry] = []
        with self._cond:
            segments = sorted(self._segments)
        while len(out) < limit:
            if self._rseg not in segments:
                later = [s for s in segments if s > self._rseg]
                if not later:
                    break
                self._rseg, self._rpos = later[0], 0
            try:
                fh = self._reader_file(self._rseg)
                fh.seek(self._rpos)
                while len(out) < limit:
                    line = fh.readline()
                    if not line.endswith(b"\n"):
                        break
                    at = self._rpos
                    self._rpos += len(line)
                    try:
                        entry = SpoolEntry.decode(line)
                    except CorruptRecord as exc:
                        self._move_aside(self._rseg, at, line, str(exc))
                        continue
                    if entry.number > self._rlast:
                        self._rlast = entry.number
                        out.append(entry)
            except FileNotFoundError:
                pass
            if len(out) >= limit:
                break
            later = [s for s in segments if s > self._rseg]
            if not later:
                break
            self._rseg, self._rpos = later[0], 0
        return out

    def _reader_file(self, seg: int) -> Any:
        if self._rfile_seg != seg or self._rfile is None:
            if self._rfile is not None:
                self._rfile.close()
            self._rfile = None
            self._rfile = open(self._seg_path(seg), "rb")  # noqa: SIM115 - kept open between reads
            self._rfile_seg = seg
        return self._rfile

    def pending_entries(self, through: int | None = None) -> list[SpoolEntry]:
        """Unacknowledged records, up to number `through` (the reader position is not moved)."""
        saved = (self._rseg, self._rpos, self._rlast)
        self.rewind()
        out: list[SpoolEntry] = []
        while batch := self.read(10_000):
            out.extend(e for e in batch if through is None or e.number <= through)
            if through is not None and batch[-1].number >= through:
                break
        self._rseg, self._rpos, self._rlast = saved
        return out

    def ack(self, number: int) -> None:
        """Kafka acknowledged every record through `number`."""
        with self._cond:
            if number <= self.acked:
                return
            self.acked = number
            for seg in sorted(self._segments):
                if seg != self._write_seg and self._segments[seg][1] <= number:
                    self._seg_path(seg).unlink(missing_ok=True)
                    del self._segments[seg]
            self.state_written_at = time.time()
            write_json_atomic(self._dir / STATE_FILE, {"acked": number, "written_at": self.state_written_at})
            self._update_gauges()
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            if self._rfile is not None:
                self._rfile.close()
                self._rfile = None
            if not self._closed:
                os.fsync(self._fd)
                os.close(self._fd)
                self._closed = True
