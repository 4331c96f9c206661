"""When a kernel fault happened: the event time of a line and of a parsed record, never the read time
when the kernel's own clock is known.

- `line_event_time`: the time a whole log line carries (a wall-clock stamp, or an uptime plus the
  boot time), for the agent's file source;
- `record_time` (`record_event_time`): the time of a parsed record, with the clock it came from: its
  own wall-clock stamp (for a stamp without a year, the agent's event time of the line, whose year
  was completed relative to the read rather than to the parse), else its uptime plus the line's boot
  time, else the event time the agent computed for the line, else (nothing better known) the time
  it was read;
- `boot_times`: the boot time of each node named by recorded node state (`GpuInventory.boot_time`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from models.kernlog.clock import at_uptime, from_epoch_us, parse_stamp
from models.kernlog.prefix import leading_stamp
from models.kernlog.record import FaultRecord
from models.node_records import GpuInventory, KernelLine, NodeRecordBase

Clock = Literal["stamp", "uptime", "line", "read"]

_JOURNAL_REALTIME = re.compile(r'"__REALTIME_TIMESTAMP"\s*:\s*"?(\d+)')
# Formats whose stamp carries no year: the parser completed it relative to its own clock.
_YEARLESS = frozenset({"syslog"})


@dataclass(frozen=True, slots=True)
class EventTime:
    at: datetime
    clock: Clock  # stamp: the record's wall clock; uptime: uptime + boot time; line: the agent's; read: read time

    @property
    def reason(self) -> str:
        return {
            "stamp": "the record's own timestamp",
            "uptime": "the record's uptime plus the node's boot time",
            "line": "the event time the node agent read with the line",
            "read": "the time the node agent read the line (no kernel clock known)",
        }[self.clock]


def line_event_time(text: str, *, read_at: datetime, boot_time: datetime | None) -> datetime | None:
    """The event time a log line carries: its wall-clock stamp (a yearless one completed relative to
    `read_at`), else its uptime plus `boot_time`; None when it carries neither (or only an uptime
    and the boot time is unknown)."""
    if text[:1] == "{":
        m = _JOURNAL_REALTIME.search(text)
        return from_epoch_us(m[1]) if m else None
    prefix = leading_stamp(text, None, read_at)
    stamp = parse_stamp(prefix.timestamp)
    if stamp is not None:
        return stamp
    if prefix.uptime_s is not None and boot_time is not None:
        return at_uptime(boot_time, prefix.uptime_s)
    return None


def record_time(rec: FaultRecord, line: KernelLine) -> EventTime:
    """The event time of a record parsed from `line` (its first line)."""
    return record_event_time(rec, boot_time=line.boot_time, line_at=line.event_at, read_at=line.observed_at)


def record_event_time(rec: FaultRecord, *, boot_time: datetime | None, line_at: datetime | None,
                      read_at: datetime) -> EventTime:
    """The event time of a record, given its node's boot time, the event time of its first line as
    its reader knew it (`line_at`) and the time it was read (`read_at`, the last resort)."""
    stamp = parse_stamp(rec.timestamp)
    if stamp is not None and rec.format in _YEARLESS and line_at is not None:
        # The agent completed the year relative to when it read the line; the parser only knows its own now.
        return EventTime(line_at, "line")
    if stamp is not None:
        return EventTime(stamp, "stamp")
    if rec.uptime_s is not None and boot_time is not None:
        return EventTime(at_uptime(boot_time, rec.uptime_s), "uptime")
    if line_at is not None:
        return EventTime(line_at, "line")
    return EventTime(read_at, "read")


def boot_times(records: Iterable[NodeRecordBase]) -> dict[str, datetime]:
    """Per node, the boot time its latest inventory (by `emitted_at`) names; nodes without one are absent."""
    latest: dict[str, GpuInventory] = {}
    for rec in records:
        if isinstance(rec, GpuInventory) and rec.boot_time is not None:
            seen = latest.get(rec.node)
            if seen is None or rec.emitted_at >= seen.emitted_at:
                latest[rec.node] = rec
    return {node: inv.boot_time for node, inv in latest.items() if inv.boot_time is not None}
