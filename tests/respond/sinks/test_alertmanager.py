"""The Alertmanager page sink against a real Alertmanager (tests/alerting.py): one alert per open
incident, routed, grouped, inhibited and silenced by Alertmanager's own configuration, re-sent while
firing, ended when resolved; all of it observed through Alertmanager's API v2."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests

from models.severity import Severity
from respond.sinks.alertmanager import AlertmanagerPager, AlertmanagerParams, sink
from respond.sinks.model import IncidentNotice
from respond.sinks.pages import PageSink
from respond.sinks.sink_store import SinkStore
from service.metrics import ResponderMetrics
from tests.respond.sinks.conftest import Clock, make_notice

# Real time: Alertmanager compares an alert's times with its own clock.
NOW = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
CONFIG = """\
route:
  receiver: fleet
  group_by: [node]
  routes:
    - matchers: ['team="vision"']
      receiver: team-vision
    - matchers: ['severity="critical"']
      receiver: oncall
receivers:
  - name: fleet
  - name: team-vision
  - name: oncall
inhibit_rules:
  - source_matchers: ['component="node"']
    target_matchers: ['component="gpu"']
    equal: [node]
"""


def notice(node: str = "gpu-node-03", *, incident: str, family: str = "gpu_lost", status: str = "open",
           component: str = "gpu", owner: str | None = None, namespace: str = "team-vision",
           codes: tuple[str, ...] = ("Xid 79",), seen_s: float = 0) -> IncidentNotice:
    n = make_notice(node, family=family, status=status, incident=incident, namespace=namespace, codes=codes,
                    last_seen=NOW + timedelta(seconds=seen_s))
    d = n.dossier.model_copy(update={"component": component, "first_seen": NOW - timedelta(minutes=1),
                                     "attribution": n.dossier.attribution.model_copy(update={"owner": owner})})
    return n.model_copy(update={"dossier": d})


def pager(*urls: str, resend_s: float = 60.0, min_severity: Severity = Severity.INFO) -> AlertmanagerPager:
    made = sink(AlertmanagerParams(urls=urls, resend_s=resend_s, min_severity=min_severity, timeout_s=2.0))
    assert made is not None
    return made


def page_sink(store: SinkStore, *urls: str, clock: Clock, **kw: Any) -> PageSink:
    return PageSink(pager(*urls, **kw), store, clock=clock, retry_base_s=30, retry_max_s=120,
                    incident_url_base="https://xidpipe.example", ticket_url=lambda i: f"https://jira.example/{i}")


def alerts(am: Any, **params: str) -> dict[str, dict[str, Any]]:
    r = requests.get(f"{am.api}/alerts", params=params, timeout=10)
    r.raise_for_status()
    return {a["labels"]["incident"]: a for a in r.json()}


@pytest.fixture
def am_clock() -> Clock:
    return Clock(NOW)


def test_the_settings_make_the_destination() -> None:
    assert sink(AlertmanagerParams()) is None
    made = sink(AlertmanagerParams(urls="http://a:9093, http://b:9093/", resend_s=90))  # type: ignore[arg-type]
    assert made is not None and made.urls == ("http://a:9093", "http://b:9093")
    assert made.policy.resend == timedelta(seconds=90)


def test_an_open_incident_is_one_routed_alert_with_its_labels_and_annotations(
        alertmanager, store: SinkStore, am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, am.url, clock=am_clock)
    out = pages.submit(notice(incident="inc-1", owner="vision"))
    assert (out.action, out.events) == ("sent", ("opened",)), out
    pages.submit(notice("gpu-node-04", incident="inc-2", family="thermal", namespace=""))
    got = alerts(am)
    assert set(got) == {"inc-1", "inc-2"}
    first = got["inc-1"]
    assert first["labels"] == {"alertname": "XidpipeIncident", "cluster": "train-a", "node": "gpu-node-03",
                               "gpu": "GPU-6a1e", "family": "gpu_lost", "severity": "critical", "team": "vision",
                               "namespace": "team-vision", "component": "gpu", "incident": "inc-1"}
    assert "namespace" not in got["inc-2"]["labels"] and "team" not in got["inc-2"]["labels"]
    ann = first["annotations"]
    assert ann["incident"] == "https://xidpipe.example/incidents/inc-1"
    assert ann["ticket"] == "https://jira.example/inc-1"
    assert ann["summary"].startswith("[xidpipe]") and "79" in ann["summary"]
    assert ann["runbook"] and ann["decision"]
    assert first["status"]["state"] == "active"
    assert [r["name"] for r in first["receivers"]] == ["team-vision"]  # routed by the team label
    assert [r["name"] for r in got["inc-2"]["receivers"]] == ["fleet"]  # a warning: the default route
    groups = requests.get(f"{am.api}/alerts/groups", timeout=10).json()
    assert sorted((g["labels"]["node"], g["receiver"]["name"]) for g in groups) == [
        ("gpu-node-03", "team-vision"), ("gpu-node-04", "fleet")]


def test_a_critical_incident_without_a_team_goes_to_the_oncall_route(alertmanager, store: SinkStore,
                                                                    am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    page_sink(store, am.url, clock=am_clock).submit(notice(incident="inc-1"))
    assert [r["name"] for r in alerts(am)["inc-1"]["receivers"]] == ["oncall"]


def test_a_node_level_fault_inhibits_the_alerts_of_its_gpus(alertmanager, store: SinkStore, am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, am.url, clock=am_clock)
    pages.submit(notice(incident="gpu-a", family="memory", codes=("Xid 48",)))
    pages.submit(notice("gpu-node-04", incident="gpu-b", family="memory", codes=("Xid 48",)))
    pages.submit(notice(incident="node-a", family="driver", component="node", codes=("Xid 62",)))
    got = alerts(am)
    assert got["gpu-a"]["status"]["state"] == "suppressed"
    assert got["gpu-a"]["status"]["inhibitedBy"], got["gpu-a"]["status"]
    assert got["gpu-b"]["status"]["state"] == "active"  # another node's GPU
    assert got["node-a"]["status"]["state"] == "active"


def test_a_silence_made_in_alertmanager_silences_the_incident(alertmanager, store: SinkStore,
                                                              am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, am.url, clock=am_clock)
    pages.submit(notice(incident="inc-1"))
    pages.submit(notice("gpu-node-04", incident="inc-2"))
    now = datetime.now(UTC)
    silence = {"matchers": [{"name": "node", "value": "gpu-node-03", "isRegex": False, "isEqual": True}],
               "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
               "createdBy": "oncall", "comment": "node in maintenance"}
    r = requests.post(f"{am.api}/silences", json=silence, timeout=10)
    assert r.status_code == 200, r.text
    sid = r.json()["silenceID"]
    pages.submit(notice(incident="inc-1", codes=("Xid 79", "Xid 48")))  # a change is sent, and still silenced
    got = alerts(am)
    assert got["inc-1"]["status"]["state"] == "suppressed" and got["inc-1"]["status"]["silencedBy"] == [sid]
    assert got["inc-2"]["status"]["state"] == "active"


def test_resolved_ends_the_alert_and_a_reopen_is_a_new_alert(alertmanager, store: SinkStore,
                                                             am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, am.url, clock=am_clock)
    pages.submit(notice(incident="inc-1"))
    am_clock.advance(minutes=1)
    out = pages.submit(notice(incident="inc-1", status="resolved"))
    assert out.events == ("resolved",)
    assert alerts(am, active="true") == {}
    assert pages.submit(notice(incident="inc-1", status="resolved")).action == "none"  # told once
    am_clock.advance(minutes=1)
    out = pages.submit(notice(incident="inc-1", seen_s=120))  # a new fault after the resolution
    assert out.events == ("opened",) and "new alert" in out.reason
    assert set(alerts(am, active="true")) == {"inc-1~2"}


def test_changed_labels_end_the_alert_under_the_old_ones(alertmanager, store: SinkStore, am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, am.url, clock=am_clock)
    pages.submit(notice(incident="inc-1", family="thermal", codes=("Xid 999",)))
    assert alerts(am)["inc-1"]["labels"]["severity"] == "warning"
    out = pages.submit(notice(incident="inc-1", family="gpu_lost"))
    assert out.events == ("changed",)
    active = list(requests.get(f"{am.api}/alerts", params={"active": "true"}, timeout=10).json())
    assert [(a["labels"]["incident"], a["labels"]["severity"]) for a in active] == [("inc-1", "critical")]


def test_a_firing_alert_is_resent_within_its_interval(alertmanager, store: SinkStore, am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, am.url, clock=am_clock, resend_s=60)
    metrics = ResponderMetrics()
    pages.metrics = metrics
    pages.submit(notice(incident="inc-1"))
    before = alerts(am)["inc-1"]["updatedAt"]
    assert pages.drain() == []  # not due yet
    am_clock.advance(seconds=61)
    [out] = pages.drain()
    assert out.events == ("refresh",)
    assert alerts(am)["inc-1"]["updatedAt"] > before
    assert metrics.pages.labels("alertmanager", "sent")._value.get() == 2


def test_below_the_minimum_severity_nothing_is_sent(alertmanager, store: SinkStore, am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, am.url, clock=am_clock, min_severity=Severity.ERROR)
    out = pages.submit(notice(incident="inc-1", family="thermal", codes=("Xid 999",)))
    assert out.action == "none" and "below" in out.reason
    assert alerts(am) == {}


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_an_unreachable_alertmanager_is_retried_with_backoff(store: SinkStore, am_clock: Clock) -> None:
    pages = page_sink(store, _closed_port(), clock=am_clock)
    out = pages.submit(notice(incident="inc-1"))
    assert out.action == "failed" and "unreachable" in (out.error or "")
    row = pages.store.page("inc-1")
    assert row is not None and row.state == "pending" and row.told_status is None
    assert row.next_attempt_at == NOW + timedelta(seconds=30)
    assert pages.drain() == []  # waits for its backoff
    am_clock.advance(seconds=30)
    [again] = pages.drain()
    assert again.action == "failed"
    row = pages.store.page("inc-1")
    assert row is not None and row.attempts == 2 and row.next_attempt_at == am_clock.now + timedelta(seconds=60)


def test_one_alertmanager_of_the_cluster_accepting_is_delivered(alertmanager, store: SinkStore,
                                                                am_clock: Clock) -> None:
    am = alertmanager(CONFIG)
    pages = page_sink(store, _closed_port(), am.url, clock=am_clock)
    assert pages.submit(notice(incident="inc-1")).action == "sent"
    assert set(alerts(am)) == {"inc-1"}
