"""The ticket sink with the real `jira` library against the Jira stand-in: one ticket per incident
under redelivery and every injected fault, recovery of a lost map, attachments, recurrences."""

from __future__ import annotations

import json
import logging
import os
import socket
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from models.dossier import render_adf, render_jira_wiki
from models.ticket_policy import TicketPolicy
from respond.sinks.jira.tracker import JiraTracker
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import TicketSink
from tests.fakes.jira.server import FakeJira
from tests.polling import poll
from tests.respond.sinks.conftest import (
    FAST_RETRY,
    JIRA_TOKEN,
    POD_SECRET,
    SLACK_TOKEN,
    Clock,
    make_notice,
    open_store,
)

ISSUE = r"/rest/api/2/issue"
GOLDEN = Path(__file__).parent / "golden"
SECRETS = (JIRA_TOKEN, POD_SECRET, SLACK_TOKEN)


def everything_jira_holds(fake: FakeJira) -> str:
    parts = []
    for issue in fake.issues.values():
        parts.append(json.dumps(issue.fields, default=str))
        parts += [c["body"] for c in issue.comments]
        parts += [data.decode() for data in issue.attachment_data.values()]
    return "\n".join(parts)


def assert_no_secrets(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def test_create_one_ticket_with_fields_dossier_and_evidence(fake_jira: FakeJira, ticket_sink: TicketSink) -> None:
    out = ticket_sink.submit(make_notice())
    assert (out.status, out.action, out.key) == ("done", "create", "GPU-1")
    issue = fake_jira.issues["GPU-1"]
    f = issue.fields
    assert f["summary"].startswith("[xidpipe] hardware: Xid 79 on gpu-node-03")
    assert f["priority"] == {"name": "Highest"} and f["issuetype"] == {"name": "Bug"}
    assert f["components"] == [{"name": "gpu-hardware"}]
    assert "xidpipe-fp-v1-3f2a9c0d11223344" in f["labels"] and "pool-h100-train" in f["labels"]
    assert "h2. Evidence" in f["description"] and f["description"].startswith("h2. What to do now")
    assert sorted(a["filename"] for a in issue.attachments) == ["dossier.json", "dossier.md", "node-nvidia-smi--q.txt"]
    dossier = json.loads(issue.attachment_data[next(a["id"] for a in issue.attachments
                                                    if a["filename"] == "dossier.json")])
    assert dossier["incident_id"] == out.incident_id
    row = ticket_sink.store.ticket(out.incident_id)
    assert row is not None and row.ticket_key == "GPU-1" and not row.recovered


def test_create_request_matches_the_golden_file(fake_jira: FakeJira, ticket_sink: TicketSink) -> None:
    notice = make_notice()
    ticket_sink.submit(notice)
    [create] = fake_jira.calls("POST", ISSUE)
    body = create.json()
    if os.environ.get("UPDATE_GOLDEN"):  # rewrite after an intended change, then review the diff
        (GOLDEN / "jira_create_gpu_lost.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    assert body["fields"].pop("description") == render_jira_wiki(notice.dossier)
    golden = json.loads((GOLDEN / "jira_create_gpu_lost.json").read_text())
    golden["fields"].pop("description")
    assert body == golden


def test_attachments_carry_the_xsrf_header_and_the_file_field(fake_jira: FakeJira, ticket_sink: TicketSink) -> None:
    ticket_sink.submit(make_notice())
    uploads = fake_jira.calls("POST", ISSUE + "/GPU-1/attachments")
    assert len(uploads) == 3
    for r in uploads:
        assert r.headers["x-atlassian-token"] == "no-check"
        assert r.headers["content-type"].startswith("multipart/form-data")
        assert b'name="file"' in r.body


def test_the_stand_in_refuses_attachments_without_the_xsrf_header(fake_jira: FakeJira,
                                                                  ticket_sink: TicketSink) -> None:
    ticket_sink.submit(make_notice())
    body = b'--b\r\nContent-Disposition: form-data; name="file"; filename="x.txt"\r\n\r\nx\r\n--b--\r\n'
    req = urllib.request.Request(fake_jira.url + ISSUE + "/GPU-1/attachments", data=body, method="POST", headers={
        "Content-Type": "multipart/form-data; boundary=b", "Authorization": "Basic " + __import__("base64").b64encode(
            f"{fake_jira.user}:{JIRA_TOKEN}".encode()).decode()})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 403
    assert len(fake_jira.issues["GPU-1"].attachments) == 3


def test_redelivery_never_opens_a_second_ticket(fake_jira: FakeJira, ticket_sink: TicketSink) -> None:
    notice = make_notice()
    outcomes = [ticket_sink.submit(notice) for _ in range(3)]
    assert [o.action for o in outcomes] == ["create", "none", "none"]
    assert list(fake_jira.issues) == ["GPU-1"]
    assert len(fake_jira.issues["GPU-1"].attachments) == 3
    assert fake_jira.issues["GPU-1"].comments == []


@pytest.mark.parametrize("deployment", ["Server", "Cloud"])
def test_lost_map_is_recovered_by_the_fingerprint_label(tmp_path: Path, deployment: str, clock: Clock) -> None:
    fake = FakeJira(token=JIRA_TOKEN, deployment=deployment).start()
    try:
        tracker = JiraTracker(fake.url, fake.user, SecretStr(JIRA_TOKEN), timeout_s=2.0)
        first = TicketSink(tracker, open_store(f"sqlite:///{tmp_path}/a.db"), retry=FAST_RETRY,
                           clock=clock)
        first.submit(make_notice())
        fresh = open_store(f"sqlite:///{tmp_path}/b.db")  # the map is gone
        second = TicketSink(JiraTracker(fake.url, fake.user, SecretStr(JIRA_TOKEN), timeout_s=2.0), fresh,
                            retry=FAST_RETRY, clock=clock)
        out = second.submit(make_notice())
        assert (out.action, out.key) == ("none", "GPU-1")
        assert list(fake.issues) == ["GPU-1"]
        row = second.store.ticket(out.incident_id)
        assert row is not None and row.recovered and row.ticket_key == "GPU-1"
        path = r"/rest/api/2/search" if deployment == "Server" else r"/rest/api/\d/search/jql"
        searches = fake.calls("GET", path)
        assert searches and all('labels = "xidpipe-fp-v1-3f2a9c0d11223344"' in r.query["jql"][0] for r in searches)
    finally:
        fake.stop()


def test_repeats_are_one_comment_per_interval_and_never_dropped(fake_jira: FakeJira, ticket_sink: TicketSink,
                                                                clock: Clock) -> None:
    ticket_sink.submit(make_notice(count=1))
    clock.advance(minutes=10)
    held = ticket_sink.submit(make_notice(count=3))
    assert held.action == "none" and "rate-limited" in held.reason and held.status == "pending"
    clock.advance(minutes=20)
    assert ticket_sink.submit(make_notice(count=6)).action == "none"
    assert ticket_sink.drain() == []  # not due yet
    clock.advance(minutes=31)
    [out] = ticket_sink.drain()
    assert out.action == "comment"
    [comment] = fake_jira.issues["GPU-1"].comments
    assert "5 more occurrence(s)" in comment["body"] and "6 in all" in comment["body"]
    assert ticket_sink.drain() == []
    assert ticket_sink.submit(make_notice(count=6)).action == "none"


def test_late_evidence_is_attached_to_the_ticket(fake_jira: FakeJira, ticket_sink: TicketSink, clock: Clock) -> None:
    ticket_sink.submit(make_notice())
    clock.advance(minutes=1)
    out = ticket_sink.submit(make_notice(evidence=("nvidia-smi -q", "lspci -vvv")))
    assert out.action == "attach"
    names = sorted(a["filename"] for a in fake_jira.issues["GPU-1"].attachments)
    assert names == ["dossier.json", "dossier.md", "node-lspci--vvv.txt", "node-nvidia-smi--q.txt"]


def test_recurrence_after_resolution_reopens_the_ticket(fake_jira: FakeJira, ticket_sink: TicketSink,
                                                        clock: Clock) -> None:
    first = make_notice()
    ticket_sink.submit(first)
    fake_jira.set_status("GPU-1", "Done")
    clock.advance(days=2)
    again = make_notice(incident="v1:3f2a9c0d11223344@20261129T030000.000000Z", previous=first.incident_id)
    out = ticket_sink.submit(again)
    assert (out.action, out.key) == ("reopen", "GPU-1")
    issue = fake_jira.issues["GPU-1"]
    assert issue.fields["status"]["name"] == "Reopened"
    assert "recurred" in issue.comments[-1]["body"]
    assert "xidpipe-inc-v1-3f2a9c0d11223344-20261129t030000.000000z" in issue.fields["labels"]
    assert list(fake_jira.issues) == ["GPU-1"]
    assert ticket_sink.submit(again).action == "none"


def test_recurrence_links_a_new_ticket_when_the_policy_says_so(fake_jira: FakeJira, jira: JiraTracker,
                                                               store: SinkStore, clock: Clock) -> None:
    sink = TicketSink(jira, store, TicketPolicy(recurrence="link"), retry=FAST_RETRY, clock=clock)
    first = make_notice()
    sink.submit(first)
    fake_jira.set_status("GPU-1", "Done")
    out = sink.submit(make_notice(incident="v1:3f2a9c0d11223344@2", previous=first.incident_id))
    assert (out.action, out.key) == ("link", "GPU-2")
    assert fake_jira.issues["GPU-2"].links == [{"type": {"name": "Relates"}, "outwardIssue": {"key": "GPU-1"}}]
    assert fake_jira.issues["GPU-1"].fields["status"]["name"] == "Done"


def test_a_link_that_failed_after_the_create_is_made_later(fake_jira: FakeJira, jira: JiraTracker,
                                                           store: SinkStore, clock: Clock) -> None:
    sink = TicketSink(jira, store, TicketPolicy(recurrence="link"), retry=FAST_RETRY, clock=clock)
    first = make_notice()
    sink.submit(first)
    fake_jira.set_status("GPU-1", "Done")
    fake_jira.inject("POST", r"/rest/api/2/issueLink", status=500, times=10)
    out = sink.submit(make_notice(incident="v1:3f2a9c0d11223344@2", previous=first.incident_id))
    assert out.status == "pending"
    fake_jira.faults.clear()
    clock.advance(minutes=5)
    sink.drain()
    assert list(fake_jira.issues) == ["GPU-1", "GPU-2"]
    assert fake_jira.issues["GPU-2"].links == [{"type": {"name": "Relates"}, "outwardIssue": {"key": "GPU-1"}}]


def test_application_faults_open_no_ticket(fake_jira: FakeJira, ticket_sink: TicketSink) -> None:
    out = ticket_sink.submit(make_notice(category="application", family="xid_app"))
    assert out.action == "none" and "ticket_application is off" in out.reason
    assert fake_jira.issues == {} and fake_jira.calls("POST") == []


# --- injected faults ------------------------------------------------------------------------------


@pytest.mark.parametrize(("status", "retry_after"), [(429, 1), (500, None), (502, None), (503, 1)])
def test_transient_answers_are_retried_with_backoff(fake_jira: FakeJira, ticket_sink: TicketSink, status: int,
                                                    retry_after: int | None) -> None:
    fake_jira.inject("POST", ISSUE, status=status, retry_after=retry_after)
    out = ticket_sink.submit(make_notice())
    assert (out.status, out.action) == ("done", "create")
    assert list(fake_jira.issues) == ["GPU-1"]
    creates = fake_jira.calls("POST", ISSUE)
    assert len(creates) == 2
    if retry_after:
        assert creates[1].at - creates[0].at >= retry_after * 0.95


def test_a_slow_answer_within_the_timeout_is_not_repeated(fake_jira: FakeJira, ticket_sink: TicketSink) -> None:
    fake_jira.inject("*", r"/rest/.*", kind="slow", delay=0.3, times=3)
    out = ticket_sink.submit(make_notice())
    assert (out.status, out.action) == ("done", "create")
    assert len(fake_jira.calls("POST", ISSUE)) == 1 and list(fake_jira.issues) == ["GPU-1"]


def test_timeout_after_jira_created_the_ticket_does_not_create_another(fake_jira: FakeJira, ticket_sink: TicketSink,
                                                                       clock: Clock) -> None:
    fake_jira.search_lag_s = 1.5  # the new issue is not searchable at once, as in real Jira
    fake_jira.inject("POST", ISSUE, kind="timeout", delay=1.2)
    out = ticket_sink.submit(make_notice())
    assert out.status == "pending" and "may have created" in (out.error or "")
    assert list(fake_jira.issues) == ["GPU-1"] and not fake_jira.searchable("GPU-1")  # a search now would miss it
    job = ticket_sink.store.job(out.incident_id)
    assert job is not None and job.next_attempt_at == clock.now + timedelta(seconds=60)
    poll("the ticket to be searchable", lambda: fake_jira.searchable("GPU-1"), 5, interval=0.02)
    clock.advance(seconds=60)
    [done] = ticket_sink.drain()
    assert (done.status, done.key) == ("done", "GPU-1")
    assert list(fake_jira.issues) == ["GPU-1"] and len(fake_jira.calls("POST", ISSUE)) == 1
    assert len(fake_jira.issues["GPU-1"].attachments) == 3
    row = ticket_sink.store.ticket(out.incident_id)
    assert row is not None and row.recovered


def test_timeout_on_a_comment_or_an_attachment_does_not_repeat_it(fake_jira: FakeJira, ticket_sink: TicketSink,
                                                                  clock: Clock) -> None:
    ticket_sink.submit(make_notice())
    clock.advance(hours=2)
    fake_jira.inject("POST", ISSUE + r"/GPU-1/comment", kind="timeout", delay=1.5)
    fake_jira.inject("POST", ISSUE + r"/GPU-1/attachments", kind="timeout", delay=1.5)
    out = ticket_sink.submit(make_notice(count=4, evidence=("nvidia-smi -q", "lspci -vvv")))
    assert out.status == "done"  # the last attempt found both done: "nothing new"
    issue = fake_jira.issues["GPU-1"]
    assert len(issue.comments) == 1
    assert sorted(a["filename"] for a in issue.attachments).count("node-lspci--vvv.txt") == 1


def test_jira_down_delays_tickets_and_the_drain_delivers_them(tmp_path: Path, fake_jira: FakeJira, store: SinkStore,
                                                              clock: Clock) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = TicketSink(JiraTracker(dead, fake_jira.user, SecretStr(JIRA_TOKEN), timeout_s=1.0), store,
                      retry=FAST_RETRY, clock=clock)
    notices = [make_notice(node=f"gpu-node-{i:02d}", fp=f"v1:{i:016x}") for i in range(3)]
    outs = [down.submit(n) for n in notices]
    assert {o.status for o in outs} == {"pending"}
    assert all("unreachable" in (o.error or "") for o in outs)
    jobs = down.store.jobs("pending")
    assert len(jobs) == 3 and all(j.attempts == 1 and j.last_error for j in jobs)
    up = TicketSink(JiraTracker(fake_jira.url, fake_jira.user, SecretStr(JIRA_TOKEN), timeout_s=1.0), store,
                    retry=FAST_RETRY, clock=clock)
    assert up.drain() == []  # not due before the backoff
    clock.advance(seconds=31)
    assert {o.action for o in up.drain()} == {"create"}
    assert len(fake_jira.issues) == 3 and up.store.jobs("pending") == []
    assert up.drain() == []


def test_persistent_5xx_leaves_the_ticket_pending_then_delivers_it(fake_jira: FakeJira, ticket_sink: TicketSink,
                                                                   clock: Clock) -> None:
    fake_jira.inject("*", r"/rest/.*", status=503, times=100)
    out = ticket_sink.submit(make_notice())
    assert out.status == "pending" and "HTTP 503" in (out.error or "")
    job = ticket_sink.store.job(out.incident_id)
    assert job is not None and job.next_attempt_at == clock.now + timedelta(seconds=30)
    fake_jira.faults.clear()
    clock.advance(seconds=30)
    [done] = ticket_sink.drain()
    assert done.action == "create" and list(fake_jira.issues) == ["GPU-1"]


def test_a_long_retry_after_is_honoured_by_the_queue(fake_jira: FakeJira, ticket_sink: TicketSink,
                                                     clock: Clock) -> None:
    fake_jira.inject("*", r"/rest/.*", status=429, retry_after=120, times=100)
    out = ticket_sink.submit(make_notice())
    assert out.status == "pending"
    job = ticket_sink.store.job(out.incident_id)
    assert job is not None and job.next_attempt_at == clock.now + timedelta(seconds=120)
    assert len(fake_jira.calls()) == 1  # the 120 s were not waited for in place


def test_a_refused_ticket_is_recorded_with_jiras_message(fake_jira: FakeJira, jira: JiraTracker, store: SinkStore,
                                                         clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    sink = TicketSink(jira, store, TicketPolicy(project="NOPE"), retry=FAST_RETRY, clock=clock)
    out = sink.submit(make_notice())
    assert out.status == "failed"
    assert "HTTP 400" in (out.error or "") and "valid project is required" in (out.error or "")
    job = sink.store.job(out.incident_id)
    assert job is not None and job.status == "failed" and "valid project is required" in (job.last_error or "")
    assert len(fake_jira.calls("POST", ISSUE)) == 1  # a 4xx is not retried
    assert any("valid project is required" in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert_no_secrets(*(r.getMessage() for r in caplog.records), out.error or "")


def test_an_unknown_component_does_not_keep_the_ticket_from_being_written(
        fake_jira: FakeJira, jira: JiraTracker, store: SinkStore, clock: Clock,
        caplog: pytest.LogCaptureFixture) -> None:
    sink = TicketSink(jira, store, TicketPolicy(components_by_pool={"h100-train": ["rack-b"]}), retry=FAST_RETRY,
                      clock=clock)
    out = sink.submit(make_notice())
    assert (out.status, out.action) == ("done", "create")
    assert "components" not in fake_jira.issues["GPU-1"].fields
    assert any("Component name 'rack-b' is not valid" in r.getMessage() for r in caplog.records)
    assert len(fake_jira.calls("POST", ISSUE)) == 2


@pytest.mark.parametrize(("deployment", "flavor", "field"), [("Server", "server", "name"),
                                                         ("Cloud", "cloud", "accountId")])
def test_the_owner_routing_assigns_the_ticket_as_each_jira_names_users(
        tmp_path: Path, clock: Clock, deployment: str, flavor: str, field: str) -> None:
    """A routed team's assignee is set by user name (Server) or account id (Cloud); an assignee that
    Jira does not know leaves the ticket unassigned, never unwritten. The priority is the severity's
    (a GPU lost from the bus, no cordon decision yet: critical → Highest)."""
    fake = FakeJira(token=JIRA_TOKEN, deployment=deployment).start()
    try:
        tracker = JiraTracker(fake.url, fake.user, SecretStr(JIRA_TOKEN), timeout_s=2.0, flavor=flavor)  # type: ignore[arg-type]
        routed = TicketPolicy(owners={"gpu-infra": {"assignee": "oncall-gpu"}}, infra_team="gpu-infra")
        sink = TicketSink(tracker, open_store(f"sqlite:///{tmp_path}/a.db"), routed, retry=FAST_RETRY, clock=clock)
        assert sink.submit(make_notice()).action == "create"
        issue = fake.issues["GPU-1"].fields
        assert issue["assignee"] == {field: "oncall-gpu"} and issue["priority"] == {"name": "Highest"}
        stranger = TicketPolicy(owners={"gpu-infra": {"assignee": "left-the-company"}}, infra_team="gpu-infra")
        sink = TicketSink(tracker, open_store(f"sqlite:///{tmp_path}/b.db"), stranger, retry=FAST_RETRY, clock=clock)
        out = sink.submit(make_notice(fp="v1:bb", incident="v1:bb@1"))
        assert (out.status, out.action) == ("done", "create")
        assert "assignee" not in fake.issues["GPU-2"].fields
    finally:
        fake.stop()


def test_bad_credentials_are_permanent_and_the_token_is_never_shown(fake_jira: FakeJira, store: SinkStore,
                                                                    clock: Clock,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "jira-wrong-token-Qq19ZZ0a"
    sink = TicketSink(JiraTracker(fake_jira.url, fake_jira.user, SecretStr(wrong), timeout_s=1.0), store,
                      retry=FAST_RETRY, clock=clock)
    out = sink.submit(make_notice())
    assert out.status == "failed" and "HTTP 401" in (out.error or "")
    texts = [r.getMessage() for r in caplog.records] + [out.error or "", repr(sink.tracker)]
    for text in texts:
        assert wrong not in text


def test_no_secret_reaches_jira_logs_or_errors(fake_jira: FakeJira, ticket_sink: TicketSink, clock: Clock,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake_jira.inject("POST", ISSUE, status=500, body={"errorMessages": [f"db password={POD_SECRET}"], "errors": {}})
    outs = [ticket_sink.submit(make_notice())]
    clock.advance(hours=2)
    fake_jira.inject("POST", ISSUE + r"/GPU-1/comment", status=429, retry_after=0)
    outs.append(ticket_sink.submit(make_notice(count=3, evidence=("nvidia-smi -q", "pod env"))))
    assert [o.action for o in outs] == ["create", "comment"]
    assert_no_secrets(everything_jira_holds(fake_jira), *(r.getMessage() for r in caplog.records),
                      *(str(o) for o in outs))
    assert "[REDACTED]" in everything_jira_holds(fake_jira)
    for r in fake_jira.requests:
        assert POD_SECRET.encode() not in r.body and SLACK_TOKEN.encode() not in r.body


def test_jira_cloud_gets_adf_descriptions_and_comments_on_api_v3(tmp_path: Path, clock: Clock) -> None:
    fake = FakeJira(token=JIRA_TOKEN, deployment="Cloud").start()
    try:
        tracker = JiraTracker(fake.url, fake.user, SecretStr(JIRA_TOKEN), timeout_s=1.0, flavor="cloud")
        sink = TicketSink(tracker, open_store(f"sqlite:///{tmp_path}/c.db"), retry=FAST_RETRY, clock=clock,
                          incident_url_base="https://xidpipe.example.com")
        notice = make_notice()
        assert sink.submit(notice).action == "create"
        clock.advance(hours=2)
        assert sink.submit(make_notice(count=5)).action == "comment"
        assert sink.submit(make_notice(count=5)).action == "none"  # the marker is found in the ADF comment
        [create] = fake.calls("POST", r"/rest/api/3/issue")
        page = "https://xidpipe.example.com/incidents/v1:3f2a9c0d11223344@20261127T030000.000000Z"
        assert create.json()["fields"]["description"] == render_adf(notice.dossier.model_copy(
            update={"incident_url": page}))
        [comment] = fake.issues["GPU-1"].comments
        assert comment["body"]["type"] == "doc" and page in json.dumps(comment["body"])
        assert fake.refused_bodies == []
    finally:
        fake.stop()


def test_the_stand_in_refuses_a_body_jira_would_render_badly(fake_jira: FakeJira, jira: JiraTracker) -> None:
    from jira import JIRA, JIRAError

    from models.dossier import render_markdown
    from models.ticket_policy import TicketFields
    from respond.sinks.ports import TicketBody

    d = make_notice().dossier
    client = JIRA(server=fake_jira.url, basic_auth=(fake_jira.user, JIRA_TOKEN), max_retries=0,
                  options={"check_update": False})
    with pytest.raises(JIRAError) as err:  # Markdown sent to API v2
        client.create_issue(fields={"project": {"key": "GPU"}, "issuetype": {"name": "Bug"}, "summary": "s",
                                    "description": render_markdown(d)})
    assert err.value.status_code == 400 and "Markdown" in str(err.value.response.json()["errors"]["description"])
    fields = TicketFields("GPU", "Bug", "High", (), ("xidpipe-inc-x",))
    key = jira.create(fields, "s", TicketBody.of(d)).key
    assert render_jira_wiki(d) == fake_jira.issues[key].fields["description"]
