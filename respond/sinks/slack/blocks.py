"""Slack Block Kit for incident messages, built with `slack_sdk.models.blocks` (which checks
Slack's limits when a block is serialised) from the pure `models.chat_message.message_content`.

A message: the title (header), the headline, "What to do now" (numbered steps), the facts (a
fields section), a group summary when several incidents share the message, the links to the
incident's page and the ticket, and the incident's identity (context).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from models.chat_message import ChatContent, message_content, mrkdwn
from models.dossier import gpu_name
from models.notify import Decision
from respond.sinks.model import IncidentNotice
from respond.sinks.tickets import incident_page

HEADER_CAP = 150  # Slack's limits, in characters
SECTION_CAP = 3000
FIELD_CAP = 2000
FALLBACK_CAP = 4000


def _cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[: cap - 1] + "…"


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=_cut(text, SECTION_CAP)))


def blocks_of(c: ChatContent, group_summary: str | None = None) -> list[Block]:
    steps = "\n".join(f"{n}. {s}" for n, s in enumerate(c.steps, 1))
    out: list[Block] = [
        HeaderBlock(text=PlainTextObject(text=_cut(c.title, HEADER_CAP), emoji=True)),
        _section(c.headline),
        _section(f"*What to do now*\n{steps}"),
    ]
    if group_summary:
        out.append(_section(group_summary))
    out.append(SectionBlock(fields=[MarkdownTextObject(text=_cut(f"*{label}*\n{text}", FIELD_CAP))
                                    for label, text in c.fields[:10]]))
    if c.links:
        out.append(_section(" · ".join(f"<{url}|{label}>" for label, url in c.links)))
    out.append(ContextBlock(elements=[MarkdownTextObject(text=_cut(c.context, SECTION_CAP))]))
    return out


def message(c: ChatContent, group_summary: str | None = None, prefix: str = "") -> dict[str, Any]:
    """`{"text": fallback, "blocks": [...]}` for chat.postMessage / chat.update / incoming webhooks."""
    return {"text": _cut(prefix + c.fallback, FALLBACK_CAP),
            "blocks": [b.to_dict() for b in blocks_of(c, group_summary)]}


def render_group(notices: Sequence[IncidentNotice], ticket_url: Callable[[str], str | None],
                 incident_url_base: str | None = None) -> dict[str, Any]:
    """The message of a group: the latest incident in full, and a list when there are several."""
    latest = max(notices, key=lambda n: (n.dossier.last_seen, n.incident_id))
    content = message_content(latest.dossier, ticket_url(latest.incident_id),
                              incident_page(incident_url_base, latest.incident_id))
    firing = [n for n in notices if n.alert_status == "firing"]
    if len(notices) == 1 and firing:
        return message(content)
    head = f"*{len(firing)} firing, {len(notices) - len(firing)} resolved*"
    lines = []
    for n in sorted(notices, key=lambda n: n.incident_id):
        d = n.dossier
        icon = ":white_check_mark:" if n.alert_status == "resolved" else ":red_circle:"
        codes = ", ".join(f"{c.code}×{c.count}" for c in d.codes)
        gpu = gpu_name(d)
        page = incident_page(incident_url_base, n.incident_id)
        what = mrkdwn(f"{d.node}{f' GPU {gpu}' if gpu else ''}: {codes} ({n.alert_status})")
        lines.append(f"{icon} <{page}|{what}>" if page else f"{icon} {what}")
    summary = head + "\n" + "\n".join(lines)
    return message(content, summary, prefix=f"{len(firing)} firing, {len(notices) - len(firing)} resolved. ")


def render_reply(decision: Decision, notices: Sequence[IncidentNotice],
                 incident_url_base: str | None = None) -> dict[str, Any]:
    """The thread reply that tells what changed."""
    firing = sum(1 for n in notices if n.alert_status == "firing")
    parts = []
    for n in notices:
        page = incident_page(incident_url_base, n.incident_id)
        text = mrkdwn(f"{n.dossier.node}: " + ", ".join(f"{c.code}×{c.count}" for c in n.dossier.codes)
                      + f" ({n.alert_status}, {n.dossier.count} in all)")
        parts.append(f"{text} <{page}|incident page>" if page else text)
    text = _cut(f"Update: {mrkdwn(decision.reason)}. {firing} firing, {len(notices) - firing} resolved. "
                + "; ".join(parts), SECTION_CAP)
    return {"text": text, "blocks": [_section(text).to_dict()]}
