"""Slack Block Kit for incident messages, built with `slack_sdk.models.blocks` (which checks
Slack's limits when a block is serialised) from the destination-neutral parts of
`models.chat_message`: plain text, redacted, which this module escapes for Slack's mrkdwn.

A message: the title (header), the headline, "What to do now" (numbered steps), the facts (a
fields section), a group summary when several incidents share the message, the links to the
incident's page and the ticket, and the incident's identity (context). A thread reply: one
section that says what changed. A message to a team whose job an incident's fault hit
(`AffectedMessage`): its title, what happened to the job, the incident's page, its identity.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from models.chat_message import AffectedMessage, ChatContent, ChatMessage, GroupMessage, GroupReply

HEADER_CAP = 150  # Slack's limits, in characters
SECTION_CAP = 3000
FIELD_CAP = 2000
FALLBACK_CAP = 4000
EMOJI = {"hardware": ":rotating_light:", "suspected_hardware": ":warning:", "interconnect": ":link:",
         "driver": ":gear:", "application": ":bug:", "thermal": ":fire:", "fleet": ":globe_with_meridians:"}


def mrkdwn(text: str) -> str:
    """Plain (already redacted) text for Slack's mrkdwn: `&`, `<`, `>` escaped as Slack requires."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[: cap - 1] + "…"


def _section(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=_cut(text, SECTION_CAP)))


def blocks_of(c: ChatContent, group_summary: str | None = None) -> list[Block]:
    steps = "\n".join(f"{n}. {mrkdwn(s)}" for n, s in enumerate(c.steps, 1))
    headline = (f"{EMOJI.get(c.category, ':grey_question:')} *{mrkdwn(c.category)}* ({mrkdwn(c.severity)}): "
                f"{mrkdwn(c.reason)}")
    out: list[Block] = [
        HeaderBlock(text=PlainTextObject(text=_cut(c.title, HEADER_CAP), emoji=True)),
        _section(headline),
        _section(f"*What to do now*\n{steps}"),
    ]
    if group_summary:
        out.append(_section(group_summary))
    out.append(SectionBlock(fields=[MarkdownTextObject(text=_cut(f"*{label}*\n{mrkdwn(text)}", FIELD_CAP))
                                    for label, text in c.fields[:10]]))
    if c.links:
        out.append(_section(" · ".join(f"<{url}|{label}>" for label, url in c.links)))
    out.append(ContextBlock(elements=[MarkdownTextObject(text=_cut(mrkdwn(c.context), SECTION_CAP))]))
    return out


def message(c: ChatContent, group_summary: str | None = None, prefix: str = "") -> dict[str, Any]:
    """`{"text": fallback, "blocks": [...]}` for chat.postMessage / chat.update / incoming webhooks."""
    return {"text": _cut(prefix + mrkdwn(c.fallback), FALLBACK_CAP),
            "blocks": [b.to_dict() for b in blocks_of(c, group_summary)]}


def render_group(group: GroupMessage) -> dict[str, Any]:
    """The message of a group: the latest incident in full, and a list when there are several."""
    if len(group.entries) == 1 and group.firing:
        return message(group.content)
    counts = f"{group.firing} firing, {group.resolved} resolved"
    lines = []
    for e in sorted(group.entries, key=lambda e: e.incident_id):
        icon = ":white_check_mark:" if e.status == "resolved" else ":red_circle:"
        what = mrkdwn(e.summary)
        lines.append(f"{icon} <{e.page}|{what}>" if e.page else f"{icon} {what}")
    return message(group.content, f"*{counts}*\n" + "\n".join(lines), prefix=f"{counts}. ")


def render_reply(reply: GroupReply) -> dict[str, Any]:
    """The thread reply that tells what changed."""
    group = reply.group
    parts = [f"{mrkdwn(e.update)} <{e.page}|incident page>" if e.page else mrkdwn(e.update) for e in group.entries]
    text = _cut(f"Update: {mrkdwn(reply.reason)}. {group.firing} firing, {group.resolved} resolved. "
                + "; ".join(parts), SECTION_CAP)
    return {"text": text, "blocks": [_section(text).to_dict()]}


def render_affected(m: AffectedMessage) -> dict[str, Any]:
    """The message to a team whose job the incident's fault hit."""
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=_cut(m.title, HEADER_CAP), emoji=True)),
                           _section(mrkdwn(m.text))]
    if m.links:
        blocks.append(_section(" · ".join(f"<{url}|{label}>" for label, url in m.links)))
    blocks.append(ContextBlock(elements=[MarkdownTextObject(text=_cut(mrkdwn(m.context), SECTION_CAP))]))
    return {"text": _cut(mrkdwn(m.text), FALLBACK_CAP), "blocks": [b.to_dict() for b in blocks]}


def render(m: ChatMessage) -> dict[str, Any]:
    """A group's message, a thread reply or a message to an affected team as Slack takes it: `{"text", "blocks"}`."""
    if isinstance(m, AffectedMessage):
        return render_affected(m)
    return render_reply(m) if isinstance(m, GroupReply) else render_group(m)
