"""The sink tables on PostgreSQL: the ticket map, queue, notification log and silences behave as on SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from models.notify import GroupPolicy, Matcher
from respond.sinks.jira.tracker import JiraTracker
from respond.sinks.notifications import ChatNotifier
from respond.sinks.outbox import OutboxChat
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import TicketSink
from tests.fakes.jira.server import FakeJira
from tests.respond.sinks.conftest import FAST_RETRY, JIRA_TOKEN, Clock, make_notice, open_store


@pytest.fixture
def pg_store(postgres_database: str) -> Iterator[SinkStore]:
    store = open_store(postgres_database)
    yield store
    store.engine.dispose()


def test_tickets_and_notifications_on_postgres(pg_store: SinkStore, fake_jira: FakeJira, clock: Clock,
                                               tmp_path: Path) -> None:
    sink = TicketSink(JiraTracker(fake_jira.url, fake_jira.user, SecretStr(JIRA_TOKEN), timeout_s=2.0), pg_store,
                      retry=FAST_RETRY, clock=clock)
    fake_jira.inject("POST", r"/rest/api/2/issue", status=503, times=10)
    assert sink.submit(make_notice()).status == "pending"
    fake_jira.faults.clear()
    clock.advance(minutes=1)
    assert [o.action for o in sink.drain()] == ["create"]
    clock.advance(hours=2)
    assert sink.submit(make_notice(count=3)).action == "comment"
    row = sink.store.ticket(make_notice().incident_id)
    assert row is not None and row.count == 3 and row.last_comment_at == clock.now
    assert row.created_at.tzinfo is not None

    s = pg_store.add_silence([Matcher.parse("node=gpu-node-04")], clock.now, clock.now + timedelta(hours=1), "a", "c",
                             clock.now)
    n = ChatNotifier(OutboxChat(tmp_path / "outbox"), pg_store, policy=GroupPolicy(group_wait=timedelta(0)),
                     channel_interval_s=0, clock=clock)
    assert n.submit(make_notice()).action == "send"
    assert n.submit(make_notice(node="gpu-node-04", fp="v1:0000000000000004")).action == "suppress"
    assert pg_store.expire_silence(s.id, clock.now) is not None
    assert [x.id for x in pg_store.silences(clock.now, include_expired=True)] == [s.id]
    assert len(n.store.notification_log()) == 1
