"""The bounds a kernel-log line and the numbers in it must keep to be read as a record.

Every input path (`xidpipe parse|scan` files and stdin, the agent's sources, the worker's intake)
uses `MAX_LINE_CHARS`; the parser holds every number it reads to a range. A value outside its
range makes the line not-a-record: it is never a fault and never raises. Digits are ASCII only
(`[0-9]`, never `\\d`, which also takes Arabic-Indic and full-width digits).
"""

from __future__ import annotations

# The kernel writes at most about 1 KiB per printk message (PRINTK_MESSAGE_MAX is 2 KiB); with a
# syslog or journald prefix, or as a journal JSON entry, a real line stays far below this. Readers
# cut a longer line here and end what they pass on of it (the cut line, or each of its pieces) with
# TRUNCATED_MARK; the parser reads no record from a line longer than this or ending in the mark.
MAX_LINE_CHARS = 64 * 1024
TRUNCATED_MARK = " [xidpipe: line truncated]"
# A line the parser reads a record from: a prefix and one kernel message. The kernel writes at most
# about 1 KiB per printk message (PRINTK_MESSAGE_MAX is 2 KiB); a longer line (or journal message)
# is not-a-record, which also bounds what every recogniser reads.
MAX_MESSAGE_CHARS = 4096
# Text in front of a kernel message (timestamps, host, tag) longer than this is not read for a
# time: the record keeps its message and has no timestamp.
MAX_PREFIX_CHARS = 1024
# Message texts longer than this are recognised but not remembered in the parser's caches.
MAX_CACHED_CHARS = 2048

XID_RANGE = (1, 999)  # NVIDIA's catalog numbers Xids 1-172 today; three digits leave room for new codes
SXID_RANGE = (10000, 99999)  # five digits: the first two name the NVSwitch unit (catalog: 10001-24007)
PID_MAX = 4_194_304  # the kernel's largest pid_max (PID_MAX_LIMIT on 64-bit)
UPTIME_MAX_S = 10 * 366 * 24 * 3600  # ten years of seconds since boot
KMSG_SEQ_MAX = 2**63 - 1  # /dev/kmsg sequence numbers are u64; SQL stores signed 64-bit
PCI_DOMAIN_MAX = 0xFFFF_FFFF  # NVML writes 8 hex digits; the kernel 4
PCI_BUS_MAX, PCI_DEVICE_MAX, PCI_FUNCTION_MAX = 0xFF, 0x1F, 0x7


def in_range(value: int, bounds: tuple[int, int]) -> bool:
    return bounds[0] <= value <= bounds[1]


def valid_pid(value: int) -> bool:
    return 0 <= value <= PID_MAX


def valid_uptime(value: float) -> bool:
    return 0.0 <= value <= UPTIME_MAX_S
