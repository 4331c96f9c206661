"""Kernel lines as log shippers export them: one JSON object per line whose message is the kernel's
line (Fluent Bit and Fluentd `log`, Elastic and Vector `message`, logfmt-style `msg`), with the host
and time the shipper saw beside it (`hostname`, `host` or `host.name`, `kubernetes.host`;
`@timestamp`, `timestamp`, `time`, `date` as ISO 8601 text or epoch seconds).

The message keeps its own header when the shipper kept it (`kernel: NVRM: ...`, `[ 12.3] NVRM: ...`),
and the parser reads it as any text line: a header naming a writer other than the kernel is refused
as it is there. The shipper's own tag, where it names one (`ident`, `syslog_identifier`,
`programname`, `tag`), must be the kernel's too. The host and time the shipper gives fill what the
message's header leaves out; they never replace what the kernel's header says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

MESSAGE_FIELDS = ("log", "message", "msg")
TAG_FIELDS = ("ident", "syslog_identifier", "programname", "tag")
TIME_FIELDS = ("@timestamp", "timestamp", "time", "date")
KERNEL_TAGS = frozenset({"kernel", "kern", "kmsg"})
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


class Shipped(NamedTuple):
    message: str
    host: str | None
    timestamp: str | None  # ISO 8601, UTC
    foreign_tag: str | None  # the shipper's tag when it names another writer than the kernel


def shipped(entry: Mapping[str, Any]) -> Shipped | None:
    """The kernel line a shipper's JSON object carries, with its host and time; None when it carries
    no message text."""
    message = next((v for k in MESSAGE_FIELDS if isinstance(v := entry.get(k), str)), None)
    if message is None:
        return None
    tag = next((v for k in TAG_FIELDS if isinstance(v := entry.get(k), str)), None)
    foreign = tag if tag is not None and tag.strip().lower() not in KERNEL_TAGS else None
    return Shipped(message, _host(entry), _time(entry), foreign)


def _host(entry: Mapping[str, Any]) -> str | None:
    host = entry.get("host")
    kube = entry.get("kubernetes")
    for value in (entry.get("hostname"), host, host.get("name") if isinstance(host, Mapping) else None,
                  kube.get("host") if isinstance(kube, Mapping) else None):
        if isinstance(value, str) and _HOST.fullmatch(value):
            return value
    return None


def _time(entry: Mapping[str, Any]) -> str | None:
    for key in TIME_FIELDS:
        value = entry.get(key)
        at: datetime | None = None
        if isinstance(value, str) and 10 <= len(value) <= 40:
            try:
                at = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            if at.tzinfo is None:
                continue  # a time without its zone says no instant
        elif isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1e11:
            at = datetime.fromtimestamp(value, UTC)
        if at is not None:
            return at.astimezone(UTC).isoformat()
    return None
