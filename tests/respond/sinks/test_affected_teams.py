"""Everyone affected is told, through the chat sinks: the demo's gpu-node-02 double-bit error killed jobs of
three teams; each team is told in its own channel, once, after the infrastructure channel's message, through
the outbox and through Slack alike, and nothing is posted twice on redelivery or after a failed post."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from pydantic import SecretStr

from models.chat_message import Routing
from models.dossier import Dossier
from models.notify import GroupPolicy, Matcher
from respond.sinks.build import build_sinks
from respond.sinks.model import IncidentNotice
from respond.sinks.notifications import ChatNotifier
from respond.sinks.outbox import OutboxChat
from respond.sinks.settings import SinkSettings
from respond.sinks.sink_store import SinkStore
from respond.sinks.slack.transport import SlackWebTransport
from tests.fakes.slack.server import FakeSlack
from tests.models.test_dossier import GOLDEN
from tests.respond.sinks.conftest import SLACK_TOKEN, Clock, migrated

KEY = "xidpipe.io/slack-channel"
TEAMS = {"team-nlp": "#team-nlp", "team-serving": "#team-serving", "team-vision": "#team-vision"}
POST = r"/api/chat\.postMessage"


def dbe_notice() -> IncidentNotice:
    """The demo's gpu-node-02 memory incident as the responder hands it over: team-nlp names its channel in a
    label, team-serving in an annotation (both namespace metadata), team-vision is mapped in the routing."""
    d = Dossier.model_validate_json((GOLDEN / "demo" / "gpu-node-02-memory.dossier.json").read_text())
    return IncidentNotice(dossier=d, namespace_meta={}, labels={"node": d.node, "family": d.family},
                          namespaces={"team-nlp": {KEY: TEAMS["team-nlp"]},
                                      "team-serving": {KEY: TEAMS["team-serving"], "team": "serving"}})


ROUTING = Routing(namespace_channels={"team-vision": TEAMS["team-vision"]})


def test_the_demos_dbe_tells_each_of_the_three_teams_in_its_channel(tmp_path: Path, clock: Clock) -> None:
    settings = SinkSettings(outbox_dir=tmp_path / "outbox", routing=ROUTING, slack_channel_interval_s=0)
    sinks = build_sinks(settings, migrated(f"sqlite:///{tmp_path}/x.db"))
    [chat] = sinks.chat
    chat.clock = clock
    notice = dbe_notice()
    outbox = OutboxChat(tmp_path / "outbox")
    for _ in range(3):  # redelivered and flushed again: nothing new
        sinks.chat.submit(notice)
        sinks.chat.flush()
    [infra] = outbox.messages("#gpu-infra")
    assert "gpu-node-02" in infra["text"]
    for namespace, channel in TEAMS.items():
        [msg] = outbox.messages(channel)
        text = msg["text"]
        assert f"namespace {namespace}" in text and "killed by a hardware fault" in text and "requeue it" in text
        assert "GPU 0 (serial 1654923008817) of gpu-node-02 (Xid 48)" in text
        assert "Not cordoned (dry run)" in text and notice.dossier.incident_url in json.dumps(msg["blocks"])
        assert msg["thread_ts"] is None and msg["blocks"][0]["type"] == "header"
        assert msg["written_at"] >= infra["written_at"]  # after the infrastructure channel's message
    told = [e for e in chat.store.notification_log() if "#affected:" in e.group_key]
    assert len(told) == 3


def test_a_silenced_incident_tells_nobody_until_the_silence_ends(tmp_path: Path, clock: Clock) -> None:
    settings = SinkSettings(outbox_dir=tmp_path / "outbox", routing=ROUTING, slack_channel_interval_s=0)
    sinks = build_sinks(settings, migrated(f"sqlite:///{tmp_path}/x.db"))
    [chat] = sinks.chat
    chat.clock = clock
    first = dbe_notice()
    first.dossier.affected = first.dossier.affected[:1]  # at first only team-nlp's job is known to be hit
    sinks.chat.submit(first)
    outbox = OutboxChat(tmp_path / "outbox")
    assert [len(outbox.messages(c)) for c in TEAMS.values()] == [1, 0, 0]
    chat.store.add_silence([Matcher.parse('node="gpu-node-02"')], clock.now, clock.now + timedelta(hours=1),
                           "oncall", "known bad GPU", clock.now)
    sinks.chat.submit(dbe_notice())
    sinks.chat.flush()
    assert [len(outbox.messages(c)) for c in TEAMS.values()] == [1, 0, 0]
    clock.advance(hours=1, seconds=1)
    sinks.chat.flush()
    assert [len(outbox.messages(c)) for c in TEAMS.values()] == [1, 1, 1]


def test_a_restart_tells_nobody_twice(tmp_path: Path, clock: Clock) -> None:
    url = migrated(f"sqlite:///{tmp_path}/x.db")
    settings = SinkSettings(outbox_dir=tmp_path / "outbox", routing=ROUTING, slack_channel_interval_s=0)
    for _ in range(2):  # a second responder process over the same database
        sinks = build_sinks(settings, url)
        sinks.chat.sinks[0].clock = clock
        sinks.chat.submit(dbe_notice())
        clock.advance(seconds=30)
        sinks.chat.flush()
    outbox = OutboxChat(tmp_path / "outbox")
    assert [len(outbox.messages(c)) for c in TEAMS.values()] == [1, 1, 1]


def test_slack_tells_each_team_once_and_retries_a_failed_post(store: SinkStore, clock: Clock) -> None:
    """Slack as the outbox: each team told once; a channel that does not exist yet (a refused post) is recorded
    and tried again after its delay, not at every flush, and never posted twice."""
    fake = FakeSlack(token=SLACK_TOKEN, channels=("gpu-infra", "gpu-alerts", "team-serving", "team-vision")).start()
    try:
        transport = SlackWebTransport(SecretStr(SLACK_TOKEN), base_url=fake.url + "/api/", timeout_s=1)
        notifier = ChatNotifier(transport, store, ROUTING, GroupPolicy(), channel_interval_s=0, clock=clock,
                                retry_max_s=60)
        notifier.submit(dbe_notice())
        clock.advance(seconds=30)
        notifier.flush()
        assert [len(fake.messages(c)) for c in ("gpu-infra", "team-serving", "team-vision")] == [1, 1, 1]
        [failure] = [f for f in (store.for_sink("web").failure(e) for e in _keys(notifier)) if f is not None]
        assert "channel_not_found" in failure.last_error
        posts = len(fake.calls("POST", POST))
        notifier.flush()  # before its next attempt: nothing is tried
        assert len(fake.calls("POST", POST)) == posts
        fake.channels["C00000009"] = type(fake.channels["C00000001"])("C00000009", "team-nlp")
        clock.advance(seconds=61)
        for _ in range(2):  # redelivered and flushed again: nothing new
            notifier.submit(dbe_notice())
            notifier.flush()
        for channel in TEAMS.values():
            [msg] = fake.messages(channel)
            assert "killed by a hardware fault" in msg.text and "requeue it" in msg.text
            assert msg.thread_ts is None
        assert len(fake.messages("gpu-infra")) == 1
    finally:
        fake.stop()


def _keys(notifier: ChatNotifier) -> list[str]:
    """The notification log keys the notifier would give the three teams' notices of the demo's DBE."""
    from models.affected_notice import affected_notices
    from respond.sinks.notifications import _slug

    n = dbe_notice()
    return [f"{_slug(n.incident_id)}#{a.key}" for a in affected_notices(n.dossier, n.namespace_metas(), ROUTING)]
