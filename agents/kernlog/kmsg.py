"""`/dev/kmsg`: one record per read, resumable by (boot id, sequence number).

The device (or a regular file / FIFO holding recorded records, for tests) is opened, records with
`seq <= cursor.seq` of the same boot are skipped, and gaps are reported: when the kernel overwrote
records before we read them (`EPIPE`, once) or when sequence numbers jump.

Only records of the kernel facility are passed on (`models.kernlog.origin`): a line user space wrote
into /dev/kmsg is dropped, reported through `on_foreign`, and its cursor still advances.

A record's event time is its timestamp (microseconds since boot) plus the boot time, read from
`btime` in /proc/stat once per boot (whole seconds: the event time is good to about a second).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import stat
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.kernlog.base import SourceGap, SourceItem, SourceLine, SourceSkip
from agents.procfs import PROC_SMALL_MAX, PROC_STAT_MAX, read_text
from models.kernlog.clock import at_uptime, boot_time_from_stat
from models.kernlog.origin import kmsg_origin
from models.node_records import KernelSource

log = logging.getLogger(__name__)

READ_SIZE = 8192
IDLE_POLL_S = 0.2


def parse_kmsg_record(raw: bytes) -> tuple[int, int, int, str, dict[str, str]] | None:
    """`prio,seq,ts_usec,flags[,...];message\\n KEY=value\\n` → (prio, seq, ts, message, dict)."""
    text = raw.decode("utf-8", "replace").rstrip("\n")
    head, sep, rest = text.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3:
        return None
    try:
        prio, seq, ts = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    message, *cont = rest.split("\n")
    continuation: dict[str, str] = {}
    for line in cont:
        key, eq, value = line.strip().partition("=")
        if eq:
            continuation[key] = value
    return prio, seq, ts, message, continuation


def read_boot_id(path: Path) -> str:
    return read_text(path, PROC_SMALL_MAX).partition("\n")[0].strip()


def read_boot_time(stat_path: Path = Path("/proc/stat")) -> datetime | None:
    """The running kernel's boot time (`btime` of /proc/stat, whole seconds); None when unreadable."""
    try:
        return boot_time_from_stat(read_text(stat_path, PROC_STAT_MAX))
    except OSError:
        return None


class KmsgSource:
    name: KernelSource = "kmsg"

    def __init__(
        self,
        path: Path,
        boot_id_path: Path,
        cursor: dict[str, Any] | None,
        *,
        follow: bool = True,
        read: Callable[[int, int], bytes] = os.read,
        one_record_per_read: bool | None = None,
        boot_time: Callable[[], datetime | None] = read_boot_time,
        on_foreign: Callable[[], None] | None = None,
    ) -> None:
        """`one_record_per_read`: None detects it (a character device is read record by record,
        a regular file or FIFO holding a recording is split into records). `boot_time` reads the
        boot time of the current boot; it is called once per boot. `on_foreign` is called for each
        record dropped because user space wrote it."""
        self._path = path
        self._boot_id_path = boot_id_path
        self._boot_id = read_boot_id(boot_id_path)
        self._read_boot_time = boot_time
        self._boot_time = boot_time()
        self._follow = follow
        self._read = read
        self._per_read = one_record_per_read
        self._on_foreign = on_foreign
        self._fd: int | None = None
        self._stream_buf = b""
        self.last_seq: int | None = None
        if cursor and cursor.get("boot_id") == self._boot_id and isinstance(cursor.get("seq"), int):
            self.last_seq = int(cursor["seq"])
            log.info("kmsg resuming after cursor", extra={"boot_id": self._boot_id, "seq": self.last_seq})
        else:
            if cursor:
                log.info("new boot since the cursor: reading from the first record",
                         extra={"boot_id": self._boot_id, "cursor_boot_id": cursor.get("boot_id")})
        self._new_boot = self.last_seq is None

    @property
    def boot_id(self) -> str:
        return self._boot_id

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _records(self) -> Iterator[bytes | BrokenPipeError | None]:
        """Raw records; None when idle; a BrokenPipeError instance on EPIPE (records overwritten)."""
        fd = os.open(self._path, os.O_RDONLY | os.O_NONBLOCK)
        self._fd = fd
        is_device = stat.S_ISCHR(os.fstat(fd).st_mode) if self._per_read is None else self._per_read
        if is_device:
            with contextlib.suppress(OSError):
                os.lseek(fd, 0, os.SEEK_SET)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while True:
            try:
                chunk = self._read(fd, READ_SIZE)
            except BlockingIOError:
                chunk = None
            except BrokenPipeError as exc:
                yield exc
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    yield BrokenPipeError(errno.EPIPE, "kmsg records overwritten")
                    continue
                raise
            if chunk:
                if is_device:
                    yield chunk
                else:
                    yield from self._split_stream(chunk, final=False)
                continue
            # Nothing to read: flush a buffered stream record, then wait or stop.
            if not is_device:
                yield from self._split_stream(b"", final=True)
                if not self._follow and chunk == b"":
                    st = os.fstat(fd)
                    if stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode):
                        return
            elif not self._follow:
                return
            yield None
            if stat.S_ISCHR(os.fstat(fd).st_mode) or stat.S_ISFIFO(os.fstat(fd).st_mode):
                poller.poll(IDLE_POLL_S * 1000)
                if chunk == b"" and stat.S_ISFIFO(os.fstat(fd).st_mode):
                    # writer closed the FIFO: poll returns POLLHUP at once, so back off
                    select.select([], [], [], IDLE_POLL_S)
            else:
                select.select([], [], [], IDLE_POLL_S)

    def _split_stream(self, chunk: bytes, *, final: bool) -> Iterator[bytes]:
        """Recorded streams hold many records: a header line plus lines starting with a space."""
        self._stream_buf += chunk
        lines = self._stream_buf.split(b"\n")
        tail = lines.pop()  # incomplete last line, or b""
        record: list[bytes] = []
        out: list[bytes] = []
        for line in lines:
            if line.startswith(b" ") and record:
                record.append(line)
                continue
            if record:
                out.append(b"\n".join(record) + b"\n")
            record = [line]
        # The last complete record may still get continuation lines; hold it unless final.
        if record and final and not tail:
            out.append(b"\n".join(record) + b"\n")
            record = []
        held = b"\n".join(record) + b"\n" if record else b""
        self._stream_buf = held + tail
        yield from out

    def _boot_changed(self) -> bool:
        """Sequence numbers went backwards after we had read on: a recording that spans a reboot."""
        boot = read_boot_id(self._boot_id_path)
        if boot == self._boot_id:
            return False
        log.info("boot id changed in the stream: reading the new boot from its start",
                 extra={"boot_id": boot, "previous_boot_id": self._boot_id})
        self._boot_id, self.last_seq, self._new_boot = boot, None, True
        self._boot_time = self._read_boot_time()
        return True

    def items(self) -> Iterator[SourceItem | None]:
        overrun = False
        emitted = False
        for raw in self._records():
            if raw is None:
                yield None
                continue
            if isinstance(raw, BrokenPipeError):
                overrun = True
                continue
            parsed = parse_kmsg_record(raw)
            if parsed is None:
                log.warning("unparseable kmsg record skipped", extra={"raw": raw[:200].decode("utf-8", "replace")})
                continue
            prio, seq, ts, message, cont = parsed
            last = self.last_seq
            if last is not None and seq <= last:
                if emitted and self._boot_changed():
                    last = None  # the stream went on into a new boot: read it from its start
                else:
                    continue  # already handled before a restart
            cursor = {"boot_id": self._boot_id, "seq": seq}
            expected = 0 if last is None else last + 1
            if seq > expected and (last is not None or self._new_boot):
                reason = "overrun" if overrun else "seq_jump"
                yield SourceGap(
                    source="kmsg",
                    record_id=f"kmsg-gap:{self._boot_id}:{seq}",
                    cursor={"boot_id": self._boot_id, "seq": seq - 1},
                    reason=reason,
                    lost=seq - expected,
                    boot_id=self._boot_id,
                    after_seq=last,
                    next_seq=seq,
                )
            overrun = False
            emitted = True
            self._new_boot = False
            self.last_seq = seq
            origin = kmsg_origin(prio)
            if not origin.kernel:
                log.warning("kmsg record not from the kernel dropped",
                            extra={"seq": seq, "reason": origin.reason, "raw": message[:200]})
                if self._on_foreign is not None:
                    self._on_foreign()
                yield SourceSkip(cursor, [])
                continue
            yield SourceLine(
                source="kmsg",
                message=message,
                record_id=f"kmsg:{self._boot_id}:{seq}",
                cursor=cursor,
                boot_id=self._boot_id,
                seq=seq,
                priority=prio,
                monotonic_us=ts,
                continuation=cont,
                event_at=at_uptime(self._boot_time, ts / 1_000_000) if self._boot_time is not None else None,
                boot_time=self._boot_time,
            )
