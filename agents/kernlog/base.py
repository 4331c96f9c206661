"""What every kernel-log source yields: lines and gaps, each with the cursor just after it, and for
each line the time the kernel logged it when the source can tell (`event_at`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from models.kernlog.limits import MAX_LINE_CHARS
from models.kernlog.lines import cut_line
from models.node_records import KernelSource


@dataclass(frozen=True, slots=True)
class SourceLine:
    """One record read from a source. `cursor` is where to resume once this line is handled."""

    source: KernelSource
    message: str
    record_id: str
    cursor: dict[str, Any]
    boot_id: str | None = None
    seq: int | None = None
    journal_cursor: str | None = None
    file_path: str | None = None
    file_offset: int | None = None
    content_hash: str | None = None
    priority: int | None = None
    monotonic_us: int | None = None
    continuation: dict[str, str] = field(default_factory=dict)
    event_at: datetime | None = None  # when the kernel logged it, when the source can tell
    boot_time: datetime | None = None  # the line's boot time, when known

    def __post_init__(self) -> None:  # every source's lines are held to MAX_LINE_CHARS
        if len(self.message) > MAX_LINE_CHARS:
            object.__setattr__(self, "message", cut_line(self.message))


@dataclass(frozen=True, slots=True)
class SourceGap:
    source: KernelSource
    record_id: str
    cursor: dict[str, Any]
    reason: str
    lost: int
    boot_id: str | None = None
    after_seq: int | None = None
    next_seq: int | None = None


@dataclass(frozen=True, slots=True)
class SourceSkip:
    """Lines the source's `line_filter` rejected, in bulk: only their text (for the evidence window)
    and the cursor after the last of them. Saves building an item per uninteresting line."""

    cursor: dict[str, Any]
    messages: list[str]


SourceItem = SourceLine | SourceGap | SourceSkip


class KernelLogSource(Protocol):
    name: KernelSource

    def items(self) -> Iterator[SourceItem | None]:
        """Yield items as they are read; yield None when idle so the caller can check for stop."""
        ...

    def close(self) -> None: ...
