"""Repeat throttling, decided in one place (`models.repeats`): the stream's incident updates, the
ticket sink's repeat comments and the chat notifier's group intervals all ask `repeat_gate`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.notify import Alert, GroupPolicy, SentRecord, content_hash, decide
from models.repeats import publish_change, repeat_gate
from models.ticket_policy import TicketPolicy, TicketState, TicketSubject, decide_ticket

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.parametrize(("since_last", "due", "wait"), [
    (None, True, 0 * S),  # nothing went out yet
    (0 * S, False, 5 * S),  # one just went out
    (3 * S, False, 2 * S),
    (5 * S, True, 0 * S),  # the interval is over: due again
    (9 * S, True, 0 * S),
    (-2 * S, False, 7 * S),  # a clock that went back waits the interval from the last one
])
def test_one_repeat_per_interval(since_last: timedelta | None, due: bool, wait: timedelta) -> None:
    gate = repeat_gate(since_last, 5 * S)
    assert (gate.due, gate.wait) == (due, wait)


@pytest.mark.parametrize("kind", ["opened", "reopened", "reclassified", "attributed", "resolved"])
def test_every_change_but_a_repeat_is_published_at_once(kind: str) -> None:
    assert publish_change(kind, 0 * S, 5 * S)
    assert not publish_change("updated", 0 * S, 5 * S) and publish_change("updated", 5 * S, 5 * S)


@pytest.mark.parametrize(("after", "comments"), [(10 * S, False), (3599 * S, False), (3600 * S, True),
                                               (7200 * S, True)])
def test_the_ticket_sink_comments_on_repeats_once_per_comment_interval(after: timedelta, comments: bool) -> None:
    policy = TicketPolicy(comment_interval_s=3600)
    subject = TicketSubject(incident_id="v2:a@1", fingerprint="v2:a", category="hardware", family="memory",
                            node="n", status="open", count=5, last_seen=T0)
    ticket = TicketState(key="GPU-1", created_at=T0 - 5 * S, category="hardware", count=1, last_comment_at=T0)
    d = decide_ticket(subject, ticket, None, T0 + after, policy)
    assert d.action == ("comment" if comments else "none")
    assert d.not_before == (None if comments else T0 + timedelta(hours=1))  # measured from the last comment


@pytest.mark.parametrize(("after", "repeats"), [(timedelta(hours=1), False), (timedelta(hours=4), True),
                                                (timedelta(hours=5), True)])
def test_the_notifier_repeats_a_firing_group_once_per_repeat_interval(after: timedelta, repeats: bool) -> None:
    alert = Alert(fingerprint="f", labels={"node": "n"}, status="firing", starts_at=T0)
    group = GroupPolicy(repeat_interval=timedelta(hours=4))
    sent = SentRecord(group_key="g", sent_at=T0, content_hash=content_hash([alert]))
    d = decide([alert], T0 + after, group, sent)
    assert d.action == ("update" if repeats else "suppress")
    assert d.not_before == (None if repeats else T0 + timedelta(hours=4))
