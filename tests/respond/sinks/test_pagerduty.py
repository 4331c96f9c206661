"""The PagerDuty page sink against a stand-in as strict as the Events API v2 (tests/fakes/pagerduty):
trigger and resolve on the incident's dedup key, a reopen as a new alert, the severity from the one
table, the links and the dossier's summary; 400 as a dead letter, 429 retried with backoff."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import SecretStr

from models.chat_message import message_content
from models.paging import PageKind, PageStatus, Step
from models.severity import Severity
from respond.sinks.pagerduty import PagerDutyParams, pd_event, sink
from respond.sinks.pages import PageSink, summary_rows
from respond.sinks.ports import PageEvent
from respond.sinks.sink_store import SinkStore
from tests.fakes.pagerduty.server import FakePagerDuty, errors_of
from tests.respond.sinks.conftest import T0, Clock, make_notice

KEY = "R0UT1NGKEY0123456789abcdef012345"
assert len(KEY) == 32


@pytest.fixture
def fake_pd() -> Iterator[FakePagerDuty]:
    fake = FakePagerDuty(routing_keys=(KEY,))
    fake.start()
    yield fake
    fake.stop()


def pd_sink(fake: FakePagerDuty, store: SinkStore, clock: Clock, key: str = KEY, **kw: Any) -> PageSink:
    pager = sink(PagerDutyParams(routing_key=SecretStr(key), url=fake.url, timeout_s=2.0, **kw))
    assert pager is not None
    return PageSink(pager, store, clock=clock, retry_base_s=30, retry_max_s=120,
                    incident_url_base="https://xidpipe.example", ticket_url=lambda i: f"https://jira.example/{i}")


def test_unconfigured_without_a_routing_key() -> None:
    assert sink(PagerDutyParams()) is None
    made = sink(PagerDutyParams(routing_key=SecretStr(KEY)))
    assert made is not None and made.policy.min_severity is Severity.ERROR and made.policy.resend is None


def test_an_incident_is_triggered_with_its_severity_links_and_summary(fake_pd: FakePagerDuty, store: SinkStore,
                                                                      clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock)
    n = make_notice(incident="inc-1")
    out = pages.submit(n)
    assert out.action == "sent" and out.events == ("opened",), out
    alert = fake_pd.alerts["inc-1"]
    assert alert.status == "triggered" and alert.severity == "critical"  # gpu_lost: the one table's critical
    assert alert.summary.startswith("[xidpipe]") and "79" in alert.summary
    assert {(link["text"], link["href"]) for link in alert.links} == {
        ("Incident page", "https://xidpipe.example/incidents/inc-1"), ("Ticket", "https://jira.example/inc-1")}
    details = alert.payload["custom_details"]
    assert details["Incident"].startswith("inc-1") and details["Fault family"] == "gpu_lost"
    assert details["Decision"] and details["what to do now"]
    assert alert.payload["source"] == "gpu-node-03" and alert.payload["group"] == "train-a"
    assert fake_pd.refused == []


def test_resolve_and_a_reopen_is_a_new_pagerduty_incident(fake_pd: FakePagerDuty, store: SinkStore,
                                                          clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock)
    pages.submit(make_notice(incident="inc-1"))
    clock.advance(minutes=5)
    assert pages.submit(make_notice(incident="inc-1", status="resolved")).events == ("resolved",)
    assert fake_pd.alerts["inc-1"].status == "resolved"
    clock.advance(minutes=5)
    out = pages.submit(make_notice(incident="inc-1", last_seen=clock.now))
    assert out.events == ("opened",)
    assert fake_pd.alerts["inc-1~2"].status == "triggered"
    assert fake_pd.incidents == {"inc-1": 1, "inc-1~2": 1}
    assert fake_pd.alerts["inc-1"].status == "resolved"


def test_a_change_and_a_step_are_log_entries_of_the_same_alert(fake_pd: FakePagerDuty, store: SinkStore,
                                                               clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock)
    pages.submit(make_notice(incident="inc-1"))
    out = pages.submit(make_notice(incident="inc-1", codes=("Xid 79", "Xid 48")))
    assert out.events == ("changed",)
    assert pages.tell("inc-1", "remediation-1-1", "node drained")
    alert = fake_pd.alerts["inc-1"]
    assert len(alert.log) == 3 and fake_pd.incidents == {"inc-1": 1}
    assert alert.log[-1]["payload"]["custom_details"]["step"] == "node drained"


def test_below_the_minimum_severity_nothing_is_sent(fake_pd: FakePagerDuty, store: SinkStore, clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock)
    out = pages.submit(make_notice(incident="inc-1", family="thermal", codes=("Xid 999",)))
    assert out.action == "none" and fake_pd.calls() == []


def test_a_refused_event_is_a_dead_letter_until_the_next_snapshot(fake_pd: FakePagerDuty, store: SinkStore,
                                                                  clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock, key="x" * 31)  # one short: PagerDuty refuses it
    out = pages.submit(make_notice(incident="inc-1"))
    assert out.action == "dead" and "routing_key" in (out.error or "")
    assert "x" * 31 not in (out.error or "")  # the key is a secret
    [row] = pages.store.pages("dead")
    assert row.incident_id == "inc-1" and row.told_status is None
    clock.advance(hours=1)
    assert pages.drain() == []  # a dead letter is not retried by itself


def test_a_rate_limit_is_retried_with_backoff(fake_pd: FakePagerDuty, store: SinkStore, clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock)
    fake_pd.inject("POST", "/v2/enqueue", status=429, times=2)
    assert pages.submit(make_notice(incident="inc-1")).action == "failed"
    row = pages.store.page("inc-1")
    assert row is not None and row.next_attempt_at == T0 + timedelta(seconds=30)
    clock.advance(seconds=30)
    assert [o.action for o in pages.drain()] == ["failed"]
    row = pages.store.page("inc-1")
    assert row is not None and row.next_attempt_at == clock.now + timedelta(seconds=60)
    clock.advance(seconds=60)
    assert [o.events for o in pages.drain()] == [("opened",)]
    assert fake_pd.alerts["inc-1"].status == "triggered"


def test_the_standin_refuses_what_pagerduty_refuses() -> None:
    good = {"routing_key": KEY, "event_action": "trigger", "dedup_key": "k",
            "payload": {"summary": "s", "source": "n", "severity": "error"}}
    assert errors_of(good, frozenset()) == []
    bad = [
        {**good, "routing_key": KEY[:-1]},
        {**good, "event_action": "open"},
        {**good, "dedup_key": "k" * 256},
        {**good, "payload": {"summary": "s" * 1025, "source": "n", "severity": "error"}},
        {**good, "payload": {"summary": "s", "source": "n", "severity": "high"}},
        {**good, "payload": {"summary": "s", "severity": "error"}},
        {**good, "payload": {"summary": "s", "source": "n", "severity": "error", "timestamp": "yesterday"}},
        {"routing_key": KEY, "event_action": "resolve"},
    ]
    assert all(errors_of(b, frozenset()) for b in bad)


def test_a_long_title_is_clipped_to_what_pagerduty_takes(fake_pd: FakePagerDuty, store: SinkStore,
                                                         clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock)
    codes = tuple(f"Xid {n}" for n in range(100, 400))
    assert pages.submit(make_notice(incident="inc-1", codes=codes)).action == "sent"
    assert len(fake_pd.alerts["inc-1"].summary) <= 1024 and fake_pd.refused == []


def an_event(kind: PageKind, status: PageStatus) -> PageEvent:
    d = make_notice(incident="inc-1").dossier
    step = Step("release@1", "cordon", T0, "release done") if kind == PageKind.CORDON else None
    return PageEvent(id="e", kind=kind, incident_id="inc-1", alert_key="inc-1", status=status,
                     severity=Severity.CRITICAL, started_at=T0, at=T0, labels={"node": d.node},
                     content=message_content(d), summary=summary_rows(d), step=step)


def test_a_step_after_the_resolution_is_not_sent() -> None:
    resolved = an_event(PageKind.CORDON, status="resolved")
    assert pd_event(resolved, KEY) is None
    assert pd_event(an_event(PageKind.CORDON, status="firing"), KEY) is not None
    assert pd_event(an_event(PageKind.RESOLVED, status="resolved"), KEY) == {
        "routing_key": KEY, "event_action": "resolve", "dedup_key": resolved.alert_key}


def test_a_dead_letter_revives_with_the_incidents_next_snapshot(fake_pd: FakePagerDuty, store: SinkStore,
                                                                clock: Clock) -> None:
    pages = pd_sink(fake_pd, store, clock)
    fake_pd.inject("POST", "/v2/enqueue", status=400, body={"status": "invalid event", "errors": ["bad"]})
    assert pages.submit(make_notice(incident="inc-1")).action == "dead"
    assert [r.incident_id for r in pages.store.pages("dead")] == ["inc-1"]
    clock.advance(minutes=1)
    out = pages.submit(make_notice(incident="inc-1", count=2))
    assert out.events == ("opened",) and pages.store.pages("dead") == []
    assert fake_pd.alerts["inc-1"].status == "triggered"


def test_the_standins_own_rate_limit_is_waited_out(store: SinkStore, clock: Clock) -> None:
    fake = FakePagerDuty(routing_keys=(KEY,), rate_limit=1, rate_window_s=0.5)
    fake.start()
    try:
        pages = pd_sink(fake, store, clock)
        assert pages.submit(make_notice("gpu-node-03", incident="inc-1")).action == "sent"
        limited = pages.submit(make_notice("gpu-node-04", incident="inc-2"))
        assert limited.action == "failed" and "429" in (limited.error or "")
        assert fake.calls("POST")[-1].path == "/v2/enqueue" and "inc-2" not in fake.alerts
        time.sleep(0.6)  # the stand-in's window passes; the sink waits its own backoff
        clock.advance(seconds=30)
        assert [o.events for o in pages.drain()] == [("opened",)]
        assert set(fake.alerts) == {"inc-1", "inc-2"}
    finally:
        fake.stop()
