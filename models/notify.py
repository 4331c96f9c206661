"""When to send a chat notification: Alertmanager's semantics as pure functions.

Alerts are grouped by `group_by` labels. A new group waits `group_wait` (so the alerts of one event
arrive together), a changed group is re-sent no sooner than `group_interval` after the last send,
an unchanged group is repeated every `repeat_interval` (both `models.repeats.repeat_gate`), and
silenced alerts are dropped. The decision carries its reason; the notification log (what was sent,
when, and its thread) is written by the caller only after a successful send.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from models.repeats import repeat_gate

MatchOp = Literal["=", "!=", "=~", "!~"]
_MATCHER = re.compile(r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*(?P<value>.*?)\s*$")


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: MatchOp
    value: str

    @classmethod
    def parse(cls, text: str) -> Matcher:
        """`node="gpu-node-03"`, `namespace=~"team-.*"`, `category!=application` (quotes optional)."""
        m = _MATCHER.match(text)
        if not m:
            raise ValueError(f"not a matcher: {text!r} (expected NAME=VALUE, NAME!=VALUE, NAME=~RE or NAME!~RE)")
        value = m["value"]
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        op: MatchOp = m["op"]  # type: ignore[assignment]
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"bad regular expression in {text!r}: {exc}") from None
        return cls(m["name"], op, value)

    def matches(self, labels: Mapping[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        full = re.fullmatch(self.value, got) is not None
        return full if self.op == "=~" else not full

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'


@dataclass(frozen=True, slots=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str

    def active(self, at: datetime) -> bool:
        return self.starts_at <= at < self.ends_at

    def silences(self, labels: Mapping[str, str], at: datetime) -> bool:
        return self.active(at) and all(m.matches(labels) for m in self.matchers)


@dataclass(frozen=True, slots=True)
class Alert:
    """One incident as the notifier sees it."""

    fingerprint: str
    labels: Mapping[str, str]
    status: Literal["firing", "resolved"]
    starts_at: datetime


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """Alertmanager's grouping timers, with its defaults."""

    group_by: tuple[str, ...] = ("node", "family")
    group_wait: timedelta = timedelta(seconds=30)
    group_interval: timedelta = timedelta(minutes=5)
    repeat_interval: timedelta = timedelta(hours=4)


@dataclass(frozen=True, slots=True)
class SentRecord:
    """The notification log entry of a group: written after a successful send."""

    group_key: str
    sent_at: datetime
    content_hash: str
    thread: str | None = None  # e.g. Slack channel and ts of the first message


@dataclass(frozen=True, slots=True)
class Decision:
    action: Literal["send", "update", "wait", "suppress"]
    reason: str
    alerts: tuple[Alert, ...] = ()
    not_before: datetime | None = None  # for "wait": when to decide again
    silenced: tuple[tuple[str, str], ...] = field(default=())  # (alert fingerprint, silence id)


def group_key(labels: Mapping[str, str], group_by: Sequence[str]) -> str:
    """`{node="n1",family="gpu_lost"}`: the group an alert belongs to."""
    return "{" + ",".join(f'{name}="{labels.get(name, "")}"' for name in group_by) + "}"


def content_hash(alerts: Iterable[Alert]) -> str:
    """What a group says: which alerts, in which state (order-independent)."""
    items = sorted(f"{a.fingerprint}:{a.status}" for a in alerts)
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def decide(
    alerts: Sequence[Alert],
    now: datetime,
    policy: GroupPolicy,
    sent: SentRecord | None,
    silences: Sequence[Silence] = (),
) -> Decision:
    """Should this group (alerts sharing one group key) be notified now, and why?"""
    live: list[Alert] = []
    silenced: list[tuple[str, str]] = []
    for alert in alerts:
        hit = next((s for s in silences if s.silences(alert.labels, now)), None)
        if hit is None:
            live.append(alert)
        else:
            silenced.append((alert.fingerprint, hit.id))
    if not live:
        if silenced:
            sid = silenced[0][1]
            s = next(x for x in silences if x.id == sid)
            return Decision("suppress", f"silenced by {sid} ({s.comment!r}, by {s.created_by}, until "
                                        f"{s.ends_at.isoformat()})", silenced=tuple(silenced))
        return Decision("suppress", "no alerts in the group")
    firing = [a for a in live if a.status == "firing"]
    digest = content_hash(live)
    if sent is None:
        if not firing:
            return Decision("suppress", "resolved before it was ever notified", silenced=tuple(silenced))
        first = min(a.starts_at for a in firing)
        ready = first + policy.group_wait
        if now < ready:
            return Decision("wait", f"new group: waiting group_wait ({_fmt(policy.group_wait)}) for more alerts",
                            not_before=ready, silenced=tuple(silenced))
        return Decision("send", f"new group of {len(firing)} firing alert(s)", tuple(live), silenced=tuple(silenced))
    if digest != sent.content_hash:
        gate = repeat_gate(now - sent.sent_at, policy.group_interval)
        if not gate.due:
            ready = now + gate.wait
            return Decision("wait", f"group changed; group_interval ({_fmt(policy.group_interval)}) since the "
                                    f"last send at {sent.sent_at.isoformat()} not over", not_before=ready,
                            silenced=tuple(silenced))
        return Decision("update", "group changed since the last send: "
                                  f"{len(firing)} firing, {len(live) - len(firing)} resolved", tuple(live),
                        silenced=tuple(silenced))
    if not firing:
        return Decision("suppress", "all alerts resolved and already notified", silenced=tuple(silenced))
    gate = repeat_gate(now - sent.sent_at, policy.repeat_interval)
    if not gate.due:
        ready = now + gate.wait
        return Decision("suppress", f"already notified at {sent.sent_at.isoformat()}; repeat after "
                                    f"{ready.isoformat()}", not_before=ready, silenced=tuple(silenced))
    return Decision("update", f"still firing: repeat_interval ({_fmt(policy.repeat_interval)}) elapsed",
                    tuple(live), silenced=tuple(silenced))


def _fmt(d: timedelta) -> str:
    s = int(d.total_seconds())
    if s % 3600 == 0 and s:
        return f"{s // 3600}h"
    if s % 60 == 0 and s:
        return f"{s // 60}m"
    return f"{s}s"
