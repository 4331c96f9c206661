"""The chat notifier with the real slack-sdk against the Slack stand-in: grouping, threads,
silences, and no message lost or duplicated under injected faults."""

from __future__ import annotations

import itertools
import logging
from datetime import timedelta

import pytest
from pydantic import SecretStr

from models.chat_message import Routing
from models.notify import GroupPolicy, Matcher
from respond.sinks.notifications import ChatNotifier
from respond.sinks.sink_store import SinkStore
from respond.sinks.slack.transport import SlackWebhookTransport, SlackWebTransport
from tests.fakes.slack.server import FakeSlack
from tests.respond.sinks.conftest import JIRA_TOKEN, POD_SECRET, SLACK_TOKEN, Clock, make_notice

POST = r"/api/chat\.postMessage"
ROUTING = Routing(namespace_channels={"team-vision-prod": "#team-vision"})


def web(fake: FakeSlack, timeout_s: int = 1) -> SlackWebTransport:
    return SlackWebTransport(SecretStr(SLACK_TOKEN), base_url=fake.url + "/api/", timeout_s=timeout_s)


@pytest.fixture
def notifier(fake_slack: FakeSlack, store: SinkStore, clock: Clock) -> ChatNotifier:
    return ChatNotifier(web(fake_slack), store, ROUTING, GroupPolicy(), channel_interval_s=0.05, clock=clock,
                        ticket_url=lambda incident: "https://jira.example.com/browse/GPU-1")


def sent_now(n: ChatNotifier, clock: Clock, notice: object) -> None:
    n.submit(notice)  # type: ignore[arg-type]
    clock.advance(seconds=30)
    n.flush()


def test_a_new_group_waits_then_one_block_kit_message(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                      clock: Clock) -> None:
    first = notifier.submit(make_notice())
    assert first.action == "wait" and "group_wait" in first.reason
    assert fake_slack.calls("POST", POST) == []
    clock.advance(seconds=30)
    [out] = notifier.flush()
    assert out.action == "send"
    [msg] = fake_slack.messages("gpu-infra")
    assert msg.blocks[0]["type"] == "header" and "Xid 79" in msg.blocks[0]["text"]["text"]
    assert "<https://jira.example.com/browse/GPU-1|Ticket>" in str(msg.blocks)
    assert msg.blocks[2]["text"]["text"].startswith("*What to do now*\n1. ")
    assert msg.text.startswith("[xidpipe] hardware") and msg.metadata is not None
    [entry] = notifier.store.notification_log()
    assert (entry.channel, entry.thread_ts, entry.transport) == ("C00000001", msg.ts, "web")
    req = fake_slack.calls("POST", POST)[0]
    assert req.headers["authorization"] == f"Bearer {SLACK_TOKEN}"


def test_redelivery_sends_nothing_new(fake_slack: FakeSlack, notifier: ChatNotifier, clock: Clock) -> None:
    sent_now(notifier, clock, make_notice())
    for _ in range(3):
        clock.advance(minutes=10)
        assert notifier.submit(make_notice()).action == "suppress"
    assert len(fake_slack.messages("gpu-infra")) == 1


def test_changes_go_into_the_thread_not_new_messages(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                     clock: Clock) -> None:
    sent_now(notifier, clock, make_notice())
    clock.advance(minutes=1)
    other_gpu = make_notice(fp="v1:00000000000000bb", codes=("Xid 79",))
    held = notifier.submit(other_gpu)
    assert held.action == "wait" and "group_interval" in held.reason
    clock.advance(minutes=5)
    [out] = notifier.flush()
    assert out.action == "update"
    [root] = fake_slack.roots("gpu-infra")
    assert root.edits == 1 and "2 firing, 0 resolved" in root.text
    [reply] = fake_slack.replies("gpu-infra", root.ts)
    assert reply.text.startswith("Update:")
    clock.advance(minutes=6)
    notifier.submit(make_notice(status="resolved"))
    clock.advance(minutes=6)
    notifier.flush()
    assert len(fake_slack.roots("gpu-infra")) == 1 and root.edits == 2
    assert "1 firing, 1 resolved" in root.text
    assert len(fake_slack.replies("gpu-infra", root.ts)) == 2
    [entry] = notifier.store.notification_log()
    assert entry.messages == 3 and entry.thread_ts == root.ts


def test_resolved_groups_are_forgotten_and_a_recurrence_continues_the_thread(fake_slack: FakeSlack,
                                                                              notifier: ChatNotifier,
                                                                              clock: Clock) -> None:
    sent_now(notifier, clock, make_notice())
    clock.advance(minutes=10)
    notifier.submit(make_notice(status="resolved"))
    clock.advance(hours=2)
    notifier.flush()
    assert notifier.store.group_keys() != []  # kept for a day
    clock.advance(days=1)
    notifier.flush()
    assert notifier.store.group_keys() == []
    clock.advance(days=3)
    notifier.submit(make_notice(incident="v1:3f2a9c0d11223344@later"))
    clock.advance(minutes=1)
    notifier.flush()
    [root] = fake_slack.roots("gpu-infra")  # the recurrence continues the group's thread
    replies = fake_slack.replies("gpu-infra", root.ts)
    assert len(replies) == 2 and root.edits == 2
    assert "1 firing, 0 resolved" in replies[-1].text and "v1:3f2a9c0d11223344@later" in root.text + str(root.blocks)


def test_a_deleted_root_starts_a_new_thread(fake_slack: FakeSlack, notifier: ChatNotifier, clock: Clock) -> None:
    sent_now(notifier, clock, make_notice())
    fake_slack.channels["C00000001"].messages.clear()  # someone deleted the message
    clock.advance(hours=4)
    [out] = notifier.flush()
    assert out.action == "update" and out.error is None
    [root] = fake_slack.roots("gpu-infra")
    [entry] = notifier.store.notification_log()
    assert entry.thread_ts == root.ts
    clock.advance(hours=4)
    notifier.flush()
    assert len(fake_slack.replies("gpu-infra", root.ts)) == 1 and root.edits == 1


def test_unchanged_firing_group_repeats_in_its_thread(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                      clock: Clock) -> None:
    sent_now(notifier, clock, make_notice())
    clock.advance(hours=4)
    [out] = notifier.flush()
    assert out.action == "update" and "repeat_interval" in out.reason
    [root] = fake_slack.roots("gpu-infra")
    assert len(fake_slack.replies("gpu-infra", root.ts)) == 1


def test_silences_suppress_and_expire(fake_slack: FakeSlack, notifier: ChatNotifier, clock: Clock) -> None:
    s = notifier.store.add_silence([Matcher.parse('node="gpu-node-03"')], clock.now, clock.now + timedelta(hours=2),
                                   "alice", "RMA in progress", clock.now)
    sent_now(notifier, clock, make_notice())
    out = notifier.flush_group(notifier.store.group_keys()[0])
    assert out.action == "suppress" and s.id in out.reason and "alice" in out.reason
    other = make_notice(node="gpu-node-04", fp="v1:0000000000000004")
    sent_now(notifier, clock, other)
    assert [m.text.split(" on ")[1][:11] for m in fake_slack.messages("gpu-infra")] == ["gpu-node-04"]
    notifier.store.expire_silence(s.id, clock.now)
    notifier.flush()
    assert len(fake_slack.roots("gpu-infra")) == 2


def test_application_faults_go_to_the_owning_team(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                  clock: Clock) -> None:
    sent_now(notifier, clock, make_notice(category="application", family="xid_app", namespace="team-vision-prod"))
    assert len(fake_slack.messages("team-vision")) == 1 and fake_slack.messages("gpu-infra") == []


# --- injected faults ------------------------------------------------------------------------------


def test_rate_limit_is_retried_after_retry_after(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                 clock: Clock) -> None:
    fake_slack.inject("POST", POST, status=429, retry_after=1)
    sent_now(notifier, clock, make_notice())
    calls = fake_slack.calls("POST", POST)
    assert len(calls) == 2 and calls[1].at - calls[0].at >= 0.95
    assert len(fake_slack.messages("gpu-infra")) == 1 and len(notifier.store.notification_log()) == 1


def test_a_server_error_is_retried(fake_slack: FakeSlack, notifier: ChatNotifier, clock: Clock) -> None:
    fake_slack.inject("POST", POST, status=500)
    sent_now(notifier, clock, make_notice())
    assert len(fake_slack.messages("gpu-infra")) == 1 and len(notifier.store.notification_log()) == 1


def test_slack_down_records_the_failure_and_a_later_flush_delivers(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                                   clock: Clock) -> None:
    fake_slack.inject("POST", POST, status=503, times=100)
    sent_now(notifier, clock, make_notice())
    assert notifier.store.notification_log() == []  # written only after success
    failure = notifier.store.failure(notifier.store.group_keys()[0])
    assert failure is not None and "HTTP 503" in failure.last_error and not failure.permanent
    clock.advance(seconds=10)
    assert notifier.flush()[0].action == "wait"
    fake_slack.faults.clear()
    clock.advance(seconds=30)
    assert notifier.flush()[0].action == "send"
    assert len(fake_slack.messages("gpu-infra")) == 1 and len(notifier.store.notification_log()) == 1
    assert notifier.store.failure(notifier.store.group_keys()[0]) is None


def test_a_timeout_after_slack_posted_does_not_post_twice(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                          clock: Clock) -> None:
    fake_slack.inject("POST", POST, kind="timeout", delay=1.6)
    sent_now(notifier, clock, make_notice())
    [msg] = fake_slack.messages("gpu-infra")
    [entry] = notifier.store.notification_log()
    assert entry.thread_ts == msg.ts
    assert fake_slack.calls("POST", r"/api/conversations\.history")


def test_a_timeout_on_a_thread_reply_does_not_reply_twice(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                          clock: Clock) -> None:
    sent_now(notifier, clock, make_notice())
    clock.advance(hours=4)
    fake_slack.inject("POST", POST, kind="timeout", delay=1.6)
    [out] = notifier.flush()
    assert out.action == "update"
    [root] = fake_slack.roots("gpu-infra")
    assert len(fake_slack.replies("gpu-infra", root.ts)) == 1


def test_a_timeout_with_nothing_posted_is_retried_later(fake_slack: FakeSlack, notifier: ChatNotifier,
                                                        clock: Clock) -> None:
    fake_slack.inject("POST", POST, kind="drop", times=10)
    sent_now(notifier, clock, make_notice())
    assert fake_slack.messages("gpu-infra") == [] and notifier.store.notification_log() == []
    fake_slack.faults.clear()
    clock.advance(minutes=1)
    notifier.flush()
    assert len(fake_slack.messages("gpu-infra")) == 1


def test_an_unknown_channel_is_a_permanent_failure(fake_slack: FakeSlack, store: SinkStore, clock: Clock) -> None:
    n = ChatNotifier(web(fake_slack), store, Routing(infra_channel="#nowhere"), channel_interval_s=0, clock=clock)
    sent_now(n, clock, make_notice())
    failure = n.store.failure(n.store.group_keys()[0])
    assert failure is not None and failure.permanent and "channel_not_found" in failure.last_error
    assert failure.next_attempt_at == clock.now + timedelta(seconds=900)
    assert n.store.notification_log() == []


def test_sends_to_one_channel_are_paced(fake_slack: FakeSlack, store: SinkStore, clock: Clock) -> None:
    n = ChatNotifier(web(fake_slack), store, channel_interval_s=0.4, clock=clock)
    for i in range(3):
        n.submit(make_notice(node=f"gpu-node-{i:02d}", fp=f"v1:{i:016x}"))
    clock.advance(seconds=30)
    assert [o.action for o in n.flush()] == ["send"] * 3
    at = [r.at for r in fake_slack.calls("POST", POST)]
    assert len(at) == 3 and all(b - a >= 0.38 for a, b in itertools.pairwise(at))


def test_no_secret_in_messages_logs_or_errors(fake_slack: FakeSlack, notifier: ChatNotifier, clock: Clock,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake_slack.inject("POST", POST, status=500, times=10,
                      body={"ok": False, "error": "fatal_error", "detail": f"token={SLACK_TOKEN}"})
    sent_now(notifier, clock, make_notice(evidence=("pod env",)))
    fake_slack.faults.clear()
    clock.advance(minutes=2)
    notifier.flush()
    texts = [m.text + str(m.blocks) for m in fake_slack.messages("gpu-infra")]
    texts += [r.getMessage() for r in caplog.records]
    texts += [f.last_error for f in [notifier.store.failure(g) for g in notifier.store.group_keys()] if f]
    for secret in (SLACK_TOKEN, POD_SECRET, JIRA_TOKEN):
        assert all(secret not in t for t in texts)
        assert all(secret.encode() not in r.body for r in fake_slack.requests)


# --- incoming webhooks ----------------------------------------------------------------------------


def test_webhooks_post_per_change_and_retry_rate_limits(fake_slack: FakeSlack, store: SinkStore, clock: Clock,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    url = fake_slack.add_webhook("gpu-infra")
    n = ChatNotifier(SlackWebhookTransport({"#gpu-infra": SecretStr(url)}, timeout_s=2), store,
                     channel_interval_s=0, clock=clock)
    fake_slack.inject("POST", r"/services/.*", status=429, retry_after=1, body="rate_limited")
    sent_now(n, clock, make_notice())
    assert [m.via for m in fake_slack.messages("gpu-infra")] == ["webhook"]
    clock.advance(minutes=6)
    n.submit(make_notice(status="resolved"))
    assert len(fake_slack.messages("gpu-infra")) == 2  # no threads: a new message per change
    assert len(n.store.notification_log()) == 1 and n.store.notification_log()[0].messages == 2


def test_a_broken_webhook_is_recorded_without_its_url(fake_slack: FakeSlack, store: SinkStore, clock: Clock,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret_url = fake_slack.url + "/services/T0000/B9999999/notarealhooksecret"
    n = ChatNotifier(SlackWebhookTransport({"*": SecretStr(secret_url)}, timeout_s=2), store, channel_interval_s=0,
                     clock=clock)
    sent_now(n, clock, make_notice())
    failure = n.store.failure(n.store.group_keys()[0])
    assert failure is not None and failure.permanent and "HTTP 404" in failure.last_error
    assert all("notarealhooksecret" not in t for t in [failure.last_error, *(r.getMessage() for r in caplog.records)])
