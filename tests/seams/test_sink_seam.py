"""A new sink is one folder and one registration, and runs beside the shipped ones.

A chat destination and a second Jira registered in `respond.sinks.registry` run beside Slack and Jira,
each rendering every notification its own way, once, from its own delivery state; one failing
neither stops nor repeats the other.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr

from history.engine import make_engine
from history.migrate import upgrade
from models.chat_message import AffectedMessage, ChatMessage, GroupMessage, GroupReply
from respond.errors import PermanentError, TemporaryError
from respond.sinks import jira, registry
from respond.sinks.build import Sinks, build_sinks
from respond.sinks.jira import JiraParams
from respond.sinks.ports import Destination, Posted
from respond.sinks.settings import SinkSettings
from tests.fakes.jira.server import FakeJira
from tests.fakes.slack.server import FakeSlack
from tests.respond.sinks.conftest import JIRA_TOKEN, SLACK_TOKEN, Clock, make_notice

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
NODE = "gpu-node-07"

# --- the sinks: a second chat destination beside Slack, a second tracker beside Jira -------------


class HookParams(BaseModel):
    url: SecretStr | None = None
    timeout_s: float = 5.0


class HookSink:
    """A chat destination of its own: one plain-text line per message, POSTed as JSON to a webhook (the
    Slack stand-in's incoming webhook of #gpu-alerts, which keeps what it receives)."""

    name = "hook"
    threads = False  # no thread and no edit: every change is a new message
    broken = False  # a bug in the sink: every post raises

    def __init__(self, params: HookParams) -> None:
        assert params.url is not None
        self._url, self._timeout = params.url, params.timeout_s

    @staticmethod
    def render(message: ChatMessage) -> dict[str, Any]:
        if isinstance(message, AffectedMessage):
            return {"text": f"[AFFECTED] {message.text}"}
        group = message.group if isinstance(message, GroupReply) else message
        c = group.content
        state = "RESOLVED" if not group.firing else "FIRING"
        why = f" ({message.reason})" if isinstance(message, GroupReply) else ""
        return {"text": f"[{state}{why}] {c.title} | {c.category}: {c.reason} | first: {c.steps[0]} | "
                        + "; ".join(e.summary for e in group.entries) + f" | group {group.group_key}"}

    def post(self, channel: str, message: ChatMessage, key: str, thread_ts: str | None = None) -> Posted:
        if self.broken:
            raise RuntimeError("the hook sink is broken")
        request = urllib.request.Request(self._url.get_secret_value(), json.dumps(self.render(message)).encode(),
                                         {"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 429 or exc.code >= 500:
                raise TemporaryError(f"the hook answered HTTP {exc.code}", exc.code) from None
            raise PermanentError(f"the hook answered HTTP {exc.code}", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise TemporaryError(f"the hook is unreachable: {type(exc).__name__}") from None
        return Posted(channel, None)

    def update(self, channel: str, ts: str, message: GroupMessage, key: str) -> None:
        raise AssertionError("a sink without threads is never asked to edit")

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        return None


HOOK = Destination("hook", "chat", HookParams, lambda p: HookSink(p) if p.url else None)
# A second Jira (a disaster-recovery site, say): Jira's sink class under another name.
JIRA_DR = Destination("jira_dr", "tickets", JiraParams, jira.sink)


@pytest.fixture
def second_sinks() -> Iterator[None]:
    registry.register(HOOK)
    registry.register(JIRA_DR)
    HookSink.broken = False
    yield
    registry.unregister("chat", "hook")
    registry.unregister("tickets", "jira_dr")


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(token=SLACK_TOKEN).start()
    yield fake
    fake.stop()


def _settings(tmp_path: Path, **kw: Any) -> SinkSettings:
    return SinkSettings(outbox_dir=tmp_path / "outbox", group_wait_s=0, slack_channel_interval_s=0, **kw)


def _build(settings: SinkSettings, tmp_path: Path) -> Sinks:
    """The sinks of `settings` over a database at the newest schema."""
    url = f"sqlite:///{tmp_path}/sinks.db"
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return build_sinks(settings, url)


@contextmanager
def slack_and_hook(tmp_path: Path, fake: FakeSlack) -> Iterator[tuple[Sinks, Clock]]:
    settings = _settings(tmp_path, slack_bot_token=SLACK_TOKEN, slack_base_url=fake.url + "/api/",
                         destinations={"hook": {"url": fake.add_webhook("gpu-alerts"), "timeout_s": 2}})
    assert "hooksecret" not in repr(settings)
    sinks = _build(settings, tmp_path)
    clock = Clock()
    for sink in sinks.chat:
        sink.clock = clock
    try:
        yield sinks, clock
    finally:
        sinks.store.engine.dispose()


def test_two_chat_sinks_each_render_every_notification_their_own_way_once(second_sinks: None, tmp_path: Path,
                                                                          fake_slack: FakeSlack) -> None:
    with slack_and_hook(tmp_path, fake_slack) as (sinks, _clock):
        assert sinks.chat.names == ("slack", "hook")
        notices = [make_notice(), make_notice(node="gpu-node-04", fp="v1:0000000000000004")]
        for _ in range(3):  # redelivered: each sink decides from its own log
            for notice in notices:
                sinks.chat.submit(notice)
        slack, hook = fake_slack.messages("gpu-infra"), fake_slack.messages("gpu-alerts")
        assert [m.via for m in slack] == ["web", "web"] and [m.via for m in hook] == ["webhook", "webhook"]
        for notice, by_slack, by_hook in zip(notices, slack, hook, strict=True):
            node = notice.dossier.node
            assert by_slack.blocks[0]["type"] == "header" and node in by_slack.blocks[0]["text"]["text"]
            assert by_hook.blocks == [] and by_hook.text.startswith("[FIRING] [xidpipe] hardware")
            assert "| hardware: GPU has fallen off the bus | first: " in by_hook.text and node in by_hook.text
        [slack_sink, hook_sink] = sinks.chat
        assert [e.transport for e in slack_sink.store.notification_log()] == ["web", "web"]
        assert [e.transport for e in hook_sink.store.notification_log()] == ["hook", "hook"]
        outcomes = sinks.chat.submit(notices[0])
        assert [(o.sink, o.action) for o in outcomes] == [("slack", "suppress"), ("hook", "suppress")]


def test_one_chat_sink_failing_neither_stops_nor_repeats_the_other(second_sinks: None, tmp_path: Path,
                                                                   fake_slack: FakeSlack) -> None:
    with slack_and_hook(tmp_path, fake_slack) as (sinks, clock):
        [slack_sink, hook_sink] = sinks.chat
        fake_slack.inject("POST", r"/services/.*", status=503, times=100)  # the hook is down
        outcomes = sinks.chat.submit(make_notice())
        assert [(o.sink, o.action) for o in outcomes] == [("slack", "send"), ("hook", "failed")]
        assert len(fake_slack.messages("gpu-infra")) == 1 and fake_slack.messages("gpu-alerts") == []
        [gk] = hook_sink.store.group_keys()
        assert slack_sink.store.group_keys() == [gk]  # the same group, in rows of each sink's own
        failure = hook_sink.store.failure(gk)
        assert failure is not None and "HTTP 503" in failure.last_error and slack_sink.store.failure(gk) is None
        fake_slack.faults.clear()
        clock.advance(seconds=31)
        assert [(o.sink, o.action) for o in sinks.chat.flush()] == [("slack", "suppress"), ("hook", "send")]
        assert len(fake_slack.messages("gpu-infra")) == 1 and len(fake_slack.messages("gpu-alerts")) == 1
        assert fake_slack.messages("gpu-alerts")[0].text.endswith(f" | group {gk}")

        HookSink.broken = True  # an error that escapes a sink: raised once the other sink had the notice
        resolved = make_notice(status="resolved")
        clock.advance(minutes=6)
        with pytest.raises(RuntimeError, match="broken"):
            sinks.chat.submit(resolved)
        [root] = fake_slack.roots("gpu-infra")
        assert "resolved" in root.text and len(fake_slack.replies("gpu-infra", root.ts)) == 1
        HookSink.broken = False
        [*_, hook_out] = sinks.chat.flush()
        assert (hook_out.sink, hook_out.action) == ("hook", "update")  # a new message: the hook cannot edit
        assert [m.text[:10] for m in fake_slack.messages("gpu-alerts")] == ["[FIRING] [", "[RESOLVED]"]
        assert len(fake_slack.replies("gpu-infra", root.ts)) == 1  # Slack told it once


def test_two_trackers_each_keep_their_own_ticket_and_queue(second_sinks: None, tmp_path: Path) -> None:
    main, dr = FakeJira(token=JIRA_TOKEN).start(), FakeJira(token=JIRA_TOKEN).start()
    try:
        settings = _settings(tmp_path, jira_url=main.url, jira_user=main.user, jira_api_token=JIRA_TOKEN,
                             jira_timeout_s=1.0, ticket_attempts=1,
                             destinations={"jira_dr": {"url": dr.url, "user": dr.user, "api_token": JIRA_TOKEN,
                                                       "timeout_s": 1.0}})
        sinks = _build(settings, tmp_path)
        clock = Clock()
        for sink in sinks.tickets:
            sink.clock = clock
        assert sinks.tickets.names == ("jira", "jira_dr")
        dr.inject("*", r"/rest/.*", status=503, times=100)  # the second site is down
        notice = make_notice()
        outcomes = sinks.tickets.submit(notice)
        assert [(o.sink, o.status, o.key) for o in outcomes] == [("jira", "done", "GPU-1"),
                                                                 ("jira_dr", "pending", None)]
        assert sinks.tickets.ticket_url(notice.incident_id) == f"{main.url}/browse/GPU-1"
        dr.faults.clear()
        clock.advance(seconds=31)
        assert [(o.sink, o.action) for o in sinks.tickets.drain()] == [("jira_dr", "create")]
        sinks.tickets.submit(notice)  # redelivered: nothing new on either
        assert list(main.issues) == ["GPU-1"] and list(dr.issues) == ["GPU-1"]
        [main_sink, dr_sink] = sinks.tickets
        assert [r.ticket_key for r in main_sink.store.tickets()] == ["GPU-1"]
        assert [r.ticket_key for r in dr_sink.store.tickets()] == ["GPU-1"]
        sinks.store.engine.dispose()
    finally:
        main.stop()
        dr.stop()


def test_an_unconfigured_sink_leaves_slack_or_the_outbox_in_place(second_sinks: None, tmp_path: Path) -> None:
    sinks = _build(_settings(tmp_path), tmp_path)
    try:
        assert (sinks.chat.names, sinks.tickets.names) == (("outbox",), ("outbox",))
    finally:
        sinks.store.engine.dispose()
    sinks = _build(_settings(tmp_path, slack_bot_token="xoxb-1"), tmp_path)
    try:
        assert sinks.chat.names == ("slack",)
    finally:
        sinks.store.engine.dispose()


def test_settings_for_a_destination_nobody_registered_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hook"):
        _build(_settings(tmp_path, destinations={"hook": {"url": "http://127.0.0.1:9/"}}), tmp_path)
