"""One contract for every `ChatTransport` with threads: the Slack Web API adapter against the
stand-in, and the outbox."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from respond.errors import PermanentError
from respond.sinks.content import group_message, group_reply
from respond.sinks.outbox import OutboxChat
from respond.sinks.ports import ChatTransport
from respond.sinks.slack.transport import SlackWebTransport
from tests.fakes.slack.server import FakeSlack
from tests.respond.sinks.conftest import SLACK_TOKEN, make_notice

MESSAGE = group_message([make_notice()], lambda _: None)
EDITED = group_message([make_notice(), make_notice(fp="v1:00000000000000bb", status="resolved")], lambda _: None)
REPLY = group_reply("an alert was resolved", EDITED)


@pytest.fixture(params=["slack", "outbox"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ChatTransport]:
    if request.param == "slack":
        fake = FakeSlack(token=SLACK_TOKEN).start()
        try:
            yield SlackWebTransport(SecretStr(SLACK_TOKEN), base_url=fake.url + "/api/", timeout_s=2)
        finally:
            fake.stop()
    else:
        yield OutboxChat(tmp_path / "outbox")


def test_post_find_update_and_reply(transport: ChatTransport) -> None:
    assert transport.find("#gpu-infra", "k1") is None
    root = transport.post("#gpu-infra", MESSAGE, "k1")
    assert root.ts
    found = transport.find(root.channel, "k1")
    assert found is not None and found.ts == root.ts
    transport.update(root.channel, root.ts, EDITED, "k1")
    reply = transport.post(root.channel, REPLY, "k1-reply", thread_ts=root.ts)
    assert reply.ts and reply.ts != root.ts
    again = transport.find(root.channel, "k1-reply", thread_ts=root.ts)
    assert again is not None and again.ts == reply.ts
    assert transport.find(root.channel, "k2", thread_ts=root.ts) is None


def test_updating_a_missing_message_is_permanent(transport: ChatTransport) -> None:
    root = transport.post("#gpu-infra", MESSAGE, "k1")
    with pytest.raises(PermanentError):
        transport.update(root.channel, "1.000000", MESSAGE, "k9")
