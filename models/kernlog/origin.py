"""Whether a kernel-log record was written by the kernel, the only writer whose lines can be driver
messages.

Anyone with write access to `/dev/kmsg` (root in any container that mounts it, any process with
CAP_SYSLOG) can write a line that reads like an NVRM Xid. The kernel tags such a line with the
facility its writer gave, user (1) when none is given, never kern (0): `echo '<4>NVRM: Xid ...' >
/dev/kmsg` arrives as priority 12. journald keeps those lines as `_TRANSPORT=kernel` with their
`SYSLOG_FACILITY`, so both sources check the facility.

Read from a file (`xidpipe scan`, `parse`, `replay`, the agent's file source), a line says who wrote it
by its syslog tag (only `kernel`: `alice: NVRM: Xid ...` is `logger -t alice`, `sshd[12]: Invalid user
NVRM: ...` an ssh login name), its `<PRI>` or `/dev/kmsg` facility, or its journal entry's
`_TRANSPORT` and `SYSLOG_FACILITY`. `line_origin` judges a whole line; the parser judges the text in
front of each message the same way (`prefix_origin`). A format that names no writer (raw `dmesg`, a
bare message, a journal entry without trusted fields) is taken as the kernel's: nothing in it says
otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.kernlog.limits import MAX_PREFIX_CHARS
from models.kernlog.prefix import LineSource, line_source

KERN_FACILITY = 0
KERNEL_TAG = "kernel"


@dataclass(frozen=True, slots=True)
class Origin:
    kernel: bool
    reason: str


def kmsg_origin(priority: int) -> Origin:
    """A `/dev/kmsg` record's origin from its priority field `<N>` (facility N >> 3, level N & 7)."""
    facility = priority >> 3
    if priority >= 0 and facility == KERN_FACILITY:
        return Origin(True, "kernel facility")
    return Origin(False, f"facility {facility} (priority {priority}): written into /dev/kmsg from user space")


def journal_origin(transport: object, facility: object) -> Origin:
    """A journal entry's origin from its trusted `_TRANSPORT` and its `SYSLOG_FACILITY` (journald
    records the facility of every `/dev/kmsg` line; an entry without one came from the kernel)."""
    if transport != "kernel":
        return Origin(False, f"_TRANSPORT={str(transport)[:40]}: not a kernel-log entry")
    if facility is not None and str(facility) != str(KERN_FACILITY):
        return Origin(False, f"SYSLOG_FACILITY={str(facility)[:40]}: written into /dev/kmsg from user space")
    return Origin(True, "kernel transport, kernel facility")


def prefix_origin(source: LineSource) -> Origin:
    """A line's origin from the tag and facility of its header (`models.kernlog.prefix.line_source`)."""
    if source.facility is not None and source.facility != KERN_FACILITY:
        return Origin(False, f"facility {source.facility}: written by user space")
    if source.tag is not None and source.tag != KERNEL_TAG:
        return Origin(False, f"syslog tag {source.tag[:40]!r}: written by a process, not the kernel")
    return KERNEL


def journal_entry_origin(entry: Mapping[str, Any]) -> Origin:
    """A journal entry's origin, judged when it carries `_TRANSPORT` or `SYSLOG_FACILITY` (an export
    always does; an entry without either says nothing about its writer)."""
    if "_TRANSPORT" not in entry and "SYSLOG_FACILITY" not in entry:
        return KERNEL
    return journal_origin(entry.get("_TRANSPORT", "kernel"), entry.get("SYSLOG_FACILITY"))


def message_start(line: str) -> int:
    """Where the driver's message starts in `line` (`NVRM`, `nvidia-nvswitch`), else the length of the
    head a header can fill: the text before it is what `prefix_origin` judges."""
    start = line.find("NVRM")
    if start < 0:
        start = line.find("nvidia-nvswitch")
    return start if 0 <= start <= MAX_PREFIX_CHARS else min(len(line), MAX_PREFIX_CHARS)


def line_origin(line: str) -> Origin:
    """A whole log line's origin: a journal JSON entry's fields, else its header's tag and facility."""
    if line[:1] == "{":
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            entry = None
        if isinstance(entry, dict):
            return journal_entry_origin(entry)
    return prefix_origin(line_source(line[: message_start(line)]))


KERNEL = Origin(True, "kernel")
