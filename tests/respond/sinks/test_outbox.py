"""The embedded default: no Jira or Slack configured, the same content goes to files, idempotently."""

from __future__ import annotations

import json
from pathlib import Path

from models.chat_message import message_content
from models.dossier import render_adf, render_jira_wiki, render_markdown
from respond.sinks.build import build_sinks
from respond.sinks.outbox import OutboxChat, OutboxTracker
from respond.sinks.settings import SinkSettings
from respond.sinks.slack.blocks import message as slack_message
from tests.fakes.jira.validate import adf_errors, wiki_errors
from tests.respond.sinks.conftest import POD_SECRET, SLACK_TOKEN, Clock, make_notice, migrated


def all_text(root: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(root.rglob("*")) if p.is_file())


def test_without_jira_or_slack_everything_goes_to_the_outbox(tmp_path: Path, clock: Clock) -> None:
    settings = SinkSettings(outbox_dir=tmp_path / "outbox", incident_url_base="https://xidpipe.example.com/")
    sinks = build_sinks(settings, migrated(f"sqlite:///{tmp_path}/x.db"))
    [tickets], [chat] = sinks.tickets, sinks.chat
    assert isinstance(tickets.tracker, OutboxTracker) and isinstance(chat.transport, OutboxChat)
    assert (tickets.name, chat.name) == ("outbox", "outbox")
    tickets.clock = chat.clock = clock
    notice = make_notice()
    for _ in range(3):  # redelivery overwrites, never a second ticket or message
        sinks.tickets.submit(notice)
        sinks.chat.submit(notice)
    clock.advance(seconds=30)
    sinks.chat.flush()
    sinks.chat.flush()
    [ticket] = list((tmp_path / "outbox" / "jira").iterdir())
    assert ticket.name == "v1-3f2a9c0d11223344-20261127t030000.000000z"
    names = sorted(p.name for p in ticket.iterdir())
    assert names == ["description.adf.json", "description.wiki", "dossier.json", "dossier.md",
                     "node-nvidia-smi--q.txt", "ticket.json", "ticket.md"]
    page = "https://xidpipe.example.com/incidents/v1:3f2a9c0d11223344@20261127T030000.000000Z"
    linked = notice.dossier.model_copy(update={"incident_url": page})
    assert (ticket / "dossier.md").read_text() == render_markdown(linked)
    assert render_markdown(linked) in (ticket / "ticket.md").read_text()
    assert (ticket / "description.wiki").read_text() == render_jira_wiki(linked)
    assert json.loads((ticket / "description.adf.json").read_text()) == render_adf(linked)
    assert wiki_errors(render_jira_wiki(linked)) == [] and adf_errors(render_adf(linked)) == []
    meta = json.loads((ticket / "ticket.json").read_text())
    assert meta["priority"] == "Highest" and "xidpipe-fp-v1-3f2a9c0d11223344" in meta["labels"]
    assert json.loads((ticket / "dossier.json").read_text())["incident_id"] == notice.incident_id
    [message_file] = list((tmp_path / "outbox" / "slack" / "gpu-infra").iterdir())
    message = json.loads(message_file.read_text())
    assert sinks.tickets.ticket_url(notice.incident_id) is None  # a folder is no link: the message links the page
    content = message_content(notice.dossier, None, page)
    expected = slack_message(content)
    assert (message["text"], message["blocks"]) == (expected["text"], expected["blocks"])
    assert content.links == (("Incident page", page),) and "file://" not in json.dumps(message)
    text = all_text(tmp_path / "outbox")
    assert POD_SECRET not in text and SLACK_TOKEN not in text and "[REDACTED]" in text


def test_outbox_repeats_and_thread_updates_are_files_too(tmp_path: Path, clock: Clock) -> None:
    url = migrated(f"sqlite:///{tmp_path}/x.db")
    sinks = build_sinks(SinkSettings(outbox_dir=tmp_path / "outbox", slack_channel_interval_s=0), url)
    [tickets], [chat] = sinks.tickets, sinks.chat
    tickets.clock = chat.clock = clock
    sinks.tickets.submit(make_notice())
    sinks.chat.submit(make_notice())
    clock.advance(hours=2)
    sinks.tickets.submit(make_notice(count=7))
    sinks.chat.flush()
    sinks.chat.submit(make_notice(status="resolved", count=7))
    clock.advance(minutes=6)
    sinks.chat.flush()
    ticket = next((tmp_path / "outbox" / "jira").iterdir())
    [comment] = list((ticket / "comments").iterdir())
    assert "6 more occurrence(s)" in comment.read_text()
    chat = OutboxChat(tmp_path / "outbox")
    messages = chat.messages("#gpu-infra")
    roots = [m for m in messages if m["thread_ts"] is None]
    assert len(roots) == 1 and roots[0]["edits"] == 1 and "resolved" in roots[0]["text"]
    assert [m["thread_ts"] for m in messages if m["thread_ts"]] == [roots[0]["ts"]]
