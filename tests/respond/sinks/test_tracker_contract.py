"""One contract for every `TicketTracker`: the Jira adapter against the stand-in, and the outbox."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import SecretStr

from models.ticket_policy import TicketFields
from respond.errors import PermanentError
from respond.sinks.jira.tracker import JiraTracker
from respond.sinks.outbox import OutboxTracker
from respond.sinks.ports import TicketBody, TicketTracker
from tests.fakes.jira.server import FakeJira
from tests.respond.sinks.conftest import JIRA_TOKEN

FIELDS = TicketFields("GPU", "Bug", "High", ("gpu-hardware",), ("xidpipe", "xidpipe-fp-v1-aa", "xidpipe-inc-v1-aa-1"))


@dataclass
class Subject:
    tracker: TicketTracker
    resolve: Callable[[str], None]


@pytest.fixture(params=["jira", "jira-cloud", "outbox"])
def subject(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Subject]:
    if request.param.startswith("jira"):
        cloud = request.param == "jira-cloud"  # REST API v3: every body an ADF document
        fake = FakeJira(token=JIRA_TOKEN, deployment="Cloud" if cloud else "Server").start()
        try:
            yield Subject(JiraTracker(fake.url, fake.user, SecretStr(JIRA_TOKEN), timeout_s=2.0,
                                      flavor="cloud" if cloud else "server"),
                          lambda key: fake.set_status(key, "Done"))
            assert fake.refused_bodies == []
        finally:
            fake.stop()
    else:
        outbox = OutboxTracker(tmp_path / "outbox")
        yield Subject(outbox, outbox.resolve)


def test_create_then_get_and_find_by_label(subject: Subject) -> None:
    t = subject.tracker
    assert t.find_by_label("xidpipe-fp-v1-aa") == []
    info = t.create(FIELDS, "[xidpipe] hardware: Xid 79 on n1", TicketBody.plain("body"))
    got = t.get(info.key)
    assert got is not None and got.key == info.key and not got.resolved
    assert {"xidpipe-fp-v1-aa", "xidpipe-inc-v1-aa-1"} <= got.labels
    assert [x.key for x in t.find_by_label("xidpipe-fp-v1-aa")] == [info.key]
    assert t.find_by_label("xidpipe-fp-v1-bb") == []
    # Jira's issue page; the outbox has none (its messages link the incident's page instead)
    server = getattr(subject.tracker, "server", None)
    assert info.url == (f"{server}/browse/{info.key}" if server else None)


def test_get_unknown_is_none(subject: Subject) -> None:
    assert subject.tracker.get("GPU-999") is None


def test_comment_is_written_once_per_marker(subject: Subject) -> None:
    t = subject.tracker
    key = t.create(FIELDS, "s", TicketBody.plain("d")).key
    assert t.comment(key, "3 more occurrences", "(xidpipe update i #3 hardware)") is True
    assert t.comment(key, "3 more occurrences", "(xidpipe update i #3 hardware)") is False
    assert t.comment(key, "5 more occurrences", "(xidpipe update i #5 hardware)") is True


def test_attach_skips_names_already_there(subject: Subject) -> None:
    t = subject.tracker
    key = t.create(FIELDS, "s", TicketBody.plain("d")).key
    assert t.attach(key, {"b.txt": b"2", "a.txt": b"1"}) == ["a.txt", "b.txt"]
    assert t.attach(key, {"a.txt": b"1", "c.txt": b"3"}) == ["c.txt"]
    got = t.get(key)
    assert got is not None and got.attachments == {"a.txt", "b.txt", "c.txt"}


def test_reopen_only_a_resolved_ticket(subject: Subject) -> None:
    t = subject.tracker
    key = t.create(FIELDS, "s", TicketBody.plain("d")).key
    t.reopen(key, "Reopen")  # open already: nothing to do
    subject.resolve(key)
    got = t.get(key)
    assert got is not None and got.resolved
    t.reopen(key, "Reopen")
    got = t.get(key)
    assert got is not None and not got.resolved


def test_labels_and_links_are_idempotent(subject: Subject) -> None:
    t = subject.tracker
    a = t.create(FIELDS, "s", TicketBody.plain("d")).key
    b = t.create(TicketFields("GPU", "Bug", "High", (), ("xidpipe-inc-v1-aa-2",)), "s2", TicketBody.plain("d2")).key
    t.add_labels(a, ("xidpipe-inc-v1-aa-3",))
    t.add_labels(a, ("xidpipe-inc-v1-aa-3",))
    got = t.get(a)
    assert got is not None and "xidpipe-inc-v1-aa-3" in got.labels
    assert [x.key for x in t.find_by_label("xidpipe-inc-v1-aa-3")] == [a]
    t.link(b, a, "Relates")
    t.link(b, a, "Relates")


def test_comment_on_a_missing_ticket_is_permanent(subject: Subject) -> None:
    with pytest.raises(PermanentError):
        subject.tracker.attach("GPU-404", {"a.txt": b"x"})


def test_resolve_takes_an_open_ticket_to_done_once(subject: Subject) -> None:
    t = subject.tracker
    key = t.create(FIELDS, "GPU fell off the bus", TicketBody.plain("d")).key
    t.resolve(key, "Done")
    got = t.get(key)
    assert got is not None and got.resolved
    t.resolve(key, "Done")  # resolved already: nothing to do
    t.reopen(key, "Reopen")
    got = t.get(key)
    assert got is not None and not got.resolved
