"""One kernel record, one report: which fault reports are the same kernel record read twice.

The kernel writes a record once; a node can show it several times: in `/dev/kmsg`, in the journal,
in `kern.log` and in `syslog` (rsyslog writes both from the same record), in a file read again under
another name. Each copy arrives as its own line with its own record id, so neither the record id nor
the content hash (`models.incidents.FaultObservation.content_hash`) sees that they are one. What the
copies share is the kernel's own identity of the record:

- its **monotonic stamp**, the time since boot printk gave it (`[11123.000000]` in front of a
  kern.log or syslog line, the kmsg header's microseconds, the journal's
  `_SOURCE_MONOTONIC_TIMESTAMP`), together with **its text** (the parsed fields and message, whatever
  prefix a copy carries): two records of one boot never carry the same stamp and text;
- else its **sequence number** in the boot (`/dev/kmsg`).

A copy read with its boot id (kmsg, journald) is another boot's record when the other copy names a
different boot (`same_record`); a copy from a file carries no boot id and matches on the stamp and
text alone. A record with neither a stamp nor a sequence number (a syslog line without the
kernel's uptime) has no identity: its copies cannot be told from a storm that repeats it, and each
counts.

`xidpipe scan` keeps the first copy of each record (`first_copies`); the stream and `xidpipe replay`
store each report's identity with its fault event and drop a later copy as a duplicate
(`streams.store.Store`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from models.kernlog.record import FaultRecord

# The journal field that holds the kernel's own stamp of a kernel record (journald's `__MONOTONIC_TIMESTAMP`
# is when the journal received it); the agent passes it among the line's continuation fields.
SOURCE_MONOTONIC = "_SOURCE_MONOTONIC_TIMESTAMP"


@dataclass(frozen=True, slots=True)
class RecordIdentity:
    """What every copy of one kernel record shares: `key` (None: the record cannot be told from a
    repeat of it), and the boot it was read in when the reader knew it."""

    key: str | None
    boot: str | None = None


def record_text(rec: FaultRecord) -> str:
    """The record's text, whatever prefix a copy carries: its kind, code, device, process and message."""
    fields = (rec.kind, rec.xid, rec.sxid, rec.pci, rec.source_pci, rec.pid, rec.process, " ".join(rec.message.split()))
    return "\x1f".join("" if v is None else str(v) for v in fields)


def kernel_stamp_us(rec: FaultRecord, *, source: str | None = None, monotonic_us: int | None = None,
                    continuation: dict[str, str] | None = None) -> int | None:
    """The record's monotonic stamp in microseconds: its own (`[11123.000000]`, a kmsg header), else
    the journal's `_SOURCE_MONOTONIC_TIMESTAMP`, else the kmsg reader's stamp of the line."""
    if rec.uptime_s is not None:
        return round(rec.uptime_s * 1_000_000)
    stamp = (continuation or {}).get(SOURCE_MONOTONIC, "")
    if stamp.isascii() and stamp.isdigit():
        return int(stamp)
    if source == "kmsg" and monotonic_us is not None:  # a journald line's own monotonic is the journal's
        return monotonic_us
    return None


def record_identity(rec: FaultRecord, *, source: str | None = None, boot_id: str | None = None,
                    seq: int | None = None, monotonic_us: int | None = None,
                    continuation: dict[str, str] | None = None) -> RecordIdentity:
    """The identity of a parsed kernel record, with what its reader knew of the line it came on (its
    source, boot id, kmsg sequence number, monotonic stamp, journal fields)."""
    stamp = kernel_stamp_us(rec, source=source, monotonic_us=monotonic_us, continuation=continuation)
    if stamp is not None:
        text = hashlib.sha256(record_text(rec).encode("utf-8", "surrogatepass")).hexdigest()[:24]
        return RecordIdentity(f"mono:{stamp}:{text}", boot_id or None)
    if seq is not None and boot_id:
        return RecordIdentity(f"seq:{seq}", boot_id)
    return RecordIdentity(None, boot_id or None)


def same_record(a: RecordIdentity, b: RecordIdentity) -> bool:
    """Whether two reports are copies of one kernel record: the same key, read in the same boot when
    both readers knew it."""
    if a.key is None or a.key != b.key:
        return False
    return a.boot is None or b.boot is None or a.boot == b.boot


_T = TypeVar("_T")


def first_copies(items: Iterable[_T], identity: Callable[[_T], tuple[str, RecordIdentity]]) -> list[_T]:
    """The items, in order, without the later copies of a kernel record already seen on its node
    (`identity`: the item's node and record identity)."""
    seen: dict[tuple[str, str], list[str | None]] = {}
    out: list[_T] = []
    for item in items:
        node, ident = identity(item)
        if ident.key is not None:
            boots = seen.setdefault((node, ident.key), [])
            if any(same_record(ident, RecordIdentity(ident.key, b)) for b in boots):
                continue
            boots.append(ident.boot)
        out.append(item)
    return out
