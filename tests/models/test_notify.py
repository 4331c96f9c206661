"""Alertmanager semantics for chat notifications: grouping, timers, silences, each with a reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.notify import Alert, GroupPolicy, Matcher, SentRecord, Silence, content_hash, decide, group_key

T0 = datetime(2025, 11, 27, 3, 0, tzinfo=UTC)
POLICY = GroupPolicy(group_by=("node", "family"), group_wait=timedelta(seconds=30),
                     group_interval=timedelta(minutes=5), repeat_interval=timedelta(hours=4))
LABELS = {"node": "gpu-node-03", "family": "gpu_lost", "category": "hardware", "namespace": "team-a"}


def alert(fp: str = "v1:aa", status: str = "firing", at: datetime = T0, **labels: str) -> Alert:
    return Alert(fp, {**LABELS, **labels}, status, at)  # type: ignore[arg-type]


def sent(alerts: list[Alert], at: datetime) -> SentRecord:
    return SentRecord(group_key(LABELS, POLICY.group_by), at, content_hash(alerts), thread="C1/1700000000.1")


@pytest.mark.parametrize(
    ("name", "alerts", "now", "log", "action", "in_reason"),
    [
        ("new group waits group_wait", [alert()], T0 + timedelta(seconds=10), None, "wait", "group_wait (30s)"),
        ("new group sent after group_wait", [alert()], T0 + timedelta(seconds=30), None, "send", "new group"),
        ("unchanged group is not repeated early", [alert()], T0 + timedelta(hours=1),
         sent([alert()], T0 + timedelta(seconds=30)), "suppress", "already notified"),
        ("unchanged group repeats after repeat_interval", [alert()], T0 + timedelta(hours=5),
         sent([alert()], T0), "update", "repeat_interval (4h) elapsed"),
        ("changed group waits group_interval", [alert(), alert("v1:bb")], T0 + timedelta(minutes=2),
         sent([alert()], T0), "wait", "group_interval (5m)"),
        ("changed group updates the thread", [alert(), alert("v1:bb")], T0 + timedelta(minutes=6),
         sent([alert()], T0), "update", "2 firing, 0 resolved"),
        ("resolution is an update", [alert(status="resolved")], T0 + timedelta(minutes=6),
         sent([alert()], T0), "update", "0 firing, 1 resolved"),
        ("resolved and already told", [alert(status="resolved")], T0 + timedelta(hours=9),
         sent([alert(status="resolved")], T0), "suppress", "already notified"),
        ("resolved before the first send", [alert(status="resolved")], T0 + timedelta(minutes=1), None,
         "suppress", "resolved before"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_timers(name: str, alerts: list[Alert], now: datetime, log: SentRecord | None, action: str,
                in_reason: str) -> None:
    d = decide(alerts, now, POLICY, log)
    assert d.action == action, d.reason
    assert in_reason in d.reason


def test_wait_says_when_to_decide_again() -> None:
    d = decide([alert()], T0 + timedelta(seconds=5), POLICY, None)
    assert d.not_before == T0 + timedelta(seconds=30)


def test_silence_drops_matching_alerts_with_who_and_why() -> None:
    s = Silence("s-1", (Matcher.parse('node="gpu-node-03"'), Matcher.parse("family=~gpu_.*")), T0,
                T0 + timedelta(hours=2), "alice", "RMA in progress")
    d = decide([alert()], T0 + timedelta(minutes=1), POLICY, None, [s])
    assert d.action == "suppress" and "s-1" in d.reason and "alice" in d.reason and "RMA in progress" in d.reason
    expired = decide([alert()], T0 + timedelta(hours=3), POLICY, None, [s])
    assert expired.action == "send"


def test_silence_only_drops_the_alerts_it_matches() -> None:
    s = Silence("s-2", (Matcher.parse("namespace=team-b"),), T0, T0 + timedelta(hours=1), "bob", "maintenance")
    d = decide([alert(), alert("v1:cc", namespace="team-b")], T0 + timedelta(minutes=1), POLICY, None, [s])
    assert d.action == "send" and [a.fingerprint for a in d.alerts] == ["v1:aa"]
    assert d.silenced == (("v1:cc", "s-2"),)


@pytest.mark.parametrize(
    ("text", "labels", "expect"),
    [
        ('node="n1"', {"node": "n1"}, True),
        ("node=n1", {"node": "n2"}, False),
        ("node!=n1", {"node": "n2"}, True),
        ("namespace=~team-.*", {"namespace": "team-a"}, True),
        ("namespace=~team", {"namespace": "team-a"}, False),  # regex matches the whole value
        ("namespace!~team-.*", {"namespace": "infra"}, True),
        ("missing=", {}, True),
    ],
)
def test_matchers(text: str, labels: dict[str, str], expect: bool) -> None:
    assert Matcher.parse(text).matches(labels) is expect


@pytest.mark.parametrize("bad", ["node", "=x", "node=~(", "9node=x"])
def test_bad_matchers_are_rejected_with_the_text(bad: str) -> None:
    with pytest.raises(ValueError, match=r"matcher|regular expression"):
        Matcher.parse(bad)


def test_group_key_and_content_hash() -> None:
    assert group_key(LABELS, ("node", "family")) == '{node="gpu-node-03",family="gpu_lost"}'
    a, b = alert("v1:aa"), alert("v1:bb")
    assert content_hash([a, b]) == content_hash([b, a]) != content_hash([a])
