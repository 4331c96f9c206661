"""The file outbox: with no ticket, chat or paging destination configured, tickets, chat messages and
pages are written, with the content Jira, Slack, PagerDuty and a CloudEvents webhook would get, as
files in a local directory.

    var/outbox/jira/<ticket>/ticket.md      summary, fields and the dossier (the ticket body)
    var/outbox/jira/<ticket>/ticket.json    fields, labels, status, links (what Jira would hold)
    var/outbox/jira/<ticket>/description.wiki, description.adf.json   the body as Jira Server / Cloud get it
    var/outbox/jira/<ticket>/dossier.md, dossier.json, node-*.txt ...   the attachments
    var/outbox/jira/<ticket>/comments/<n>.md
    var/outbox/slack/<channel>/<message>.json   {"text", "blocks", "thread_ts", ...} as chat.postMessage takes
    var/outbox/pagerduty/<alert>/<kind>-<event>.json     the PagerDuty Events API v2 body (`pages`)
    var/outbox/cloudevents/<alert>/<kind>-<event>.json   the CloudEvent in structured mode (`pages`)

Names derive from the incident and the message key, so a redelivery overwrites the same files:
never a second ticket or message. Writes are atomic (a temporary file renamed into place).

Three destinations, one per port, all fallbacks (taken only when no other destination of their
port is configured), with one param: `dir` (`SinkSettings.outbox_dir`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from respond.sinks.outbox.chat import OutboxChat
from respond.sinks.outbox.files import safe_name, write_atomic
from respond.sinks.outbox.pages import OutboxPager
from respond.sinks.outbox.tickets import OutboxTracker
from respond.sinks.ports import Destination

__all__ = ["CHAT", "PAGES", "TICKETS", "OutboxChat", "OutboxPager", "OutboxParams", "OutboxTracker", "safe_name",
           "write_atomic"]


class OutboxParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    dir: Path


def _tracker(p: OutboxParams) -> OutboxTracker:
    return OutboxTracker(p.dir)


def _chat(p: OutboxParams) -> OutboxChat:
    return OutboxChat(p.dir)


def _pager(p: OutboxParams) -> OutboxPager:
    return OutboxPager(p.dir)


TICKETS = Destination("outbox", "tickets", OutboxParams, _tracker, fallback=True)
CHAT = Destination("outbox", "chat", OutboxParams, _chat, fallback=True)
PAGES = Destination("outbox", "pages", OutboxParams, _pager, fallback=True)
