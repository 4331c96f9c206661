"""Whether a kernel-log record was written by the kernel, the only writer whose lines can be driver
messages.

Anyone with write access to `/dev/kmsg` (root in any container that mounts it, any process with
CAP_SYSLOG) can write a line that reads like an NVRM Xid. The kernel tags such a line with the
facility its writer gave, user (1) when none is given, never kern (0): `echo '<4>NVRM: Xid ...' >
/dev/kmsg` arrives as priority 12. journald keeps those lines as `_TRANSPORT=kernel` with their
`SYSLOG_FACILITY`, so both sources check the facility.
"""

from __future__ import annotations

from dataclasses import dataclass

KERN_FACILITY = 0


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
