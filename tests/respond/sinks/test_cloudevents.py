"""The CloudEvents page sink against a receiver that validates every event by CloudEvents 1.0 and its
HTTP structured mode (tests/fakes/cloudevents): one typed event per opening, change, cordon step,
remediation transition and resolution, its data valid against the documented schema, signed or
sent with a bearer token, a retry carrying the same id."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from models.account import ActionItem
from respond.sinks.cloudevents import TYPES, CloudEventsParams, schema, sink
from respond.sinks.pages import PageSink
from respond.sinks.sink_store import SinkStore
from tests.fakes.cloudevents.receiver import CloudEventsReceiver, spec_errors
from tests.respond.sinks.conftest import T0, Clock, make_notice

SECRET = "whsec-cloudevents-Zq81kd02Lm"
TOKEN = "ce-bearer-token-77hd2kq0xP"


@pytest.fixture
def receiver() -> Iterator[CloudEventsReceiver]:
    fake = CloudEventsReceiver(secret=SECRET, data_schema=schema())
    fake.start()
    yield fake
    fake.stop()


def ce_sink(receiver: CloudEventsReceiver, store: SinkStore, clock: Clock, name: str | None = None,
            **kw: Any) -> PageSink:
    params = {"url": receiver.endpoint, "secret": SecretStr(SECRET), "source": "/xidpipe/train-a", "timeout_s": 2.0,
              **kw}
    pager = sink(CloudEventsParams(**params))
    assert pager is not None
    return PageSink(pager, store, name=name, clock=clock, retry_base_s=30, retry_max_s=120,
                    incident_url_base="https://xidpipe.example", ticket_url=lambda i: f"https://jira.example/{i}")


def test_every_event_of_an_incident_is_a_valid_typed_cloudevent(receiver: CloudEventsReceiver, store: SinkStore,
                                                               clock: Clock) -> None:
    pages = ce_sink(receiver, store, clock)
    pages.submit(make_notice(incident="inc-1"))
    n = make_notice(incident="inc-1", codes=("Xid 79", "Xid 48"))
    cordon = ActionItem(at=T0 + timedelta(seconds=2), action="cordon", outcome="done", decision="cordon",
                        reason="Xid 79: the GPU fell off the bus")
    n.dossier.actions.append(cordon)
    clock.advance(seconds=5)
    pages.submit(n)
    assert pages.tell("inc-1", "remediation-1-1", "node drained: 3 pods evicted")
    clock.advance(minutes=5)
    pages.submit(make_notice(incident="inc-1", status="resolved", codes=("Xid 79", "Xid 48")))
    assert receiver.refused == []
    types = [e["type"] for e in receiver.events]
    assert types == ["io.xidpipe.incident.opened", "io.xidpipe.incident.changed", "io.xidpipe.incident.cordon",
                     "io.xidpipe.incident.remediation", "io.xidpipe.incident.resolved"]
    first = receiver.events[0]
    assert (first["specversion"], first["source"], first["subject"]) == ("1.0", "/xidpipe/train-a", "inc-1")
    assert first["datacontenttype"] == "application/json" and first["time"].startswith("2026-11-27T03:00:00")
    assert first["data"]["severity"] == "critical" and first["data"]["links"] == {
        "incident": "https://xidpipe.example/incidents/inc-1", "ticket": "https://jira.example/inc-1"}
    cordon_data = receiver.events[2]["data"]["step"]
    assert cordon_data["kind"] == "cordon" and cordon_data["action"] == "cordon" and "fell off" in cordon_data["text"]
    assert receiver.events[3]["data"]["step"]["text"] == "node drained: 3 pods evicted"
    assert receiver.events[4]["data"]["status"] == "resolved"
    assert len({e["id"] for e in receiver.events}) == 5


def test_a_retried_event_carries_the_same_id(receiver: CloudEventsReceiver, store: SinkStore, clock: Clock) -> None:
    pages = ce_sink(receiver, store, clock)
    receiver.inject("POST", "/events", kind="timeout", delay=3.0)  # taken, but the answer comes too late
    out = pages.submit(make_notice(incident="inc-1"))
    assert out.action == "failed"
    clock.advance(seconds=30)
    assert [o.events for o in pages.drain()] == [("opened",)]
    assert len(receiver.events) == 1 and receiver.duplicates == 1  # the consumer took it once


def test_bearer_authentication(store: SinkStore, clock: Clock) -> None:
    receiver = CloudEventsReceiver(bearer_token=TOKEN)
    receiver.start()
    try:
        ok = ce_sink(receiver, store, clock, secret=None, bearer_token=SecretStr(TOKEN))
        assert ok.submit(make_notice(incident="inc-1")).action == "sent"
        wrong = ce_sink(receiver, store, clock, name="other", secret=None, bearer_token=SecretStr("nope-0000"))
        out = wrong.submit(make_notice(incident="inc-2"))
        assert out.action == "dead" and "401" in (out.error or "") and TOKEN not in (out.error or "")
    finally:
        receiver.stop()


def test_a_wrong_signature_is_refused(receiver: CloudEventsReceiver, store: SinkStore, clock: Clock) -> None:
    pages = ce_sink(receiver, store, clock, secret=SecretStr("another-secret-9981"))
    out = pages.submit(make_notice(incident="inc-1"))
    assert out.action == "dead" and receiver.events == [] and receiver.refused[0][0] == 401


def test_the_types_are_documented_and_the_receiver_checks_the_spec() -> None:
    assert set(TYPES.values()) == {"io.xidpipe.incident.opened", "io.xidpipe.incident.changed",
                                   "io.xidpipe.incident.cordon", "io.xidpipe.incident.remediation",
                                   "io.xidpipe.incident.resolved"}
    good = {"specversion": "1.0", "id": "1", "source": "/x", "type": "t", "time": "2026-11-27T03:00:00Z"}
    assert spec_errors(good) == []
    for bad in ({**good, "id": ""}, {k: v for k, v in good.items() if k != "source"}, {**good, "specversion": "0.3"},
                {**good, "time": "27 Nov 2026"}, {**good, "Bad_Name": "x"}, {**good, "datacontenttype": "json"}):
        assert spec_errors(bad), bad
