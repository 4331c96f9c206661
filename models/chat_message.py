"""Chat notifications for an incident: Slack Block Kit with a plain-text fallback, and routing.

Pure rendering and routing; sending, pacing and threads belong to the Slack adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from models.dossier import Dossier, title
from models.redact import redact

_EMOJI = {"hardware": ":rotating_light:", "suspected_hardware": ":warning:", "interconnect": ":link:",
          "driver": ":gear:", "application": ":bug:", "thermal": ":fire:", "fleet": ":globe_with_meridians:"}
INFRA_CATEGORIES = frozenset({"hardware", "suspected_hardware", "interconnect", "driver", "thermal", "fleet"})


class Routing(BaseModel):
    """Where messages go. Application faults go to the owning team's channel, found through a
    namespace label or annotation (`team_channel_key`), else `default_channel`; hardware, driver,
    interconnect and fleet incidents go to `infra_channel`."""

    infra_channel: str = "#gpu-infra"
    default_channel: str = "#gpu-alerts"
    team_channel_key: str = "xidpipe.io/slack-channel"
    namespace_channels: dict[str, str] = Field(default_factory=dict)  # explicit namespace → channel


def route(category: str, namespace: str | None, namespace_meta: Mapping[str, str], routing: Routing) -> tuple[str, str]:
    """The channel for an incident, and why."""
    if category in INFRA_CATEGORIES:
        return routing.infra_channel, f"{category} incidents go to the infrastructure channel"
    if namespace and namespace in routing.namespace_channels:
        return routing.namespace_channels[namespace], f"namespace {namespace} is mapped in the routing policy"
    channel = namespace_meta.get(routing.team_channel_key)
    if channel:
        return channel, f"namespace {namespace} names its channel in {routing.team_channel_key}"
    return routing.default_channel, f"no channel known for namespace {namespace or 'unknown'}: the default"


def render_message(d: Dossier, ticket_url: str | None = None, action: str | None = None) -> dict[str, Any]:
    """`{"text": fallback, "blocks": [...]}` for chat.postMessage / chat.update / incoming webhooks."""
    a = d.attribution
    where = f"{d.node} · GPU {d.gpu.pci or 'unknown'} · serial {d.gpu.serial or 'unknown'}"
    who = f"{a.namespace or 'unknown'}/{a.pod or 'unknown'} ({a.process or 'unknown'}, pid {a.pid or 'unknown'})"
    if d.component == "fleet":  # a fleet incident is the cluster's: its nodes, not a GPU or a workload
        shown = ", ".join(d.nodes[:10]) + (" …" if len(d.nodes) > 10 else "")
        where = f"cluster {d.node} · {len(d.nodes)} nodes: {shown or 'none listed'}"
        who = f"{len(d.node_incidents)} incidents on those nodes"
    codes = ", ".join(f"{c.code}×{c.count}" for c in d.codes)
    actions = action or (", ".join(f"{x.action} ({x.outcome})" for x in d.actions) if d.actions else "none yet")
    fallback = (f"{title(d)}. {d.category}: {d.reason}. Where: {where}. Workload: {who}. "
                f"Action: {actions}." + (f" Ticket: {ticket_url}" if ticket_url else ""))
    fields = [
        {"type": "mrkdwn", "text": f"*Where*\n{where}"},
        {"type": "mrkdwn", "text": f"*Workload*\n{who}"},
        {"type": "mrkdwn", "text": f"*Codes*\n{codes}"},
        {"type": "mrkdwn", "text": f"*Seen*\n{d.count}× since {d.first_seen.isoformat()}"},
        {"type": "mrkdwn", "text": f"*Action taken*\n{actions}"},
        {"type": "mrkdwn", "text": "*Ticket*\n" + (f"<{ticket_url}|open ticket>" if ticket_url else "none")},
    ]
    headline = f"{_EMOJI.get(d.category, ':grey_question:')} *{d.category}*: {d.reason}"
    context = f"incident {d.incident_id} · `{d.fingerprint}` · catalog {d.catalog_version}"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title(d)[:150], "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": headline}},
        {"type": "section", "fields": fields},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
    ]
    message: dict[str, Any] = _redact_tree({"text": fallback, "blocks": blocks})
    return message


def _redact_tree(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_tree(v) for v in value]
    if isinstance(value, dict):
        return {k: _redact_tree(v) for k, v in value.items()}
    return value
