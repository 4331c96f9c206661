"""Chat notifications for an incident: what the message says, and where it goes.

Pure: `message_content` decides the message's parts (headline, what to do now, the facts, the
links) from the dossier, escaped for Slack's mrkdwn; `route` decides the channel. The Slack
adapter (`respond.sinks.slack_blocks`) lays the parts out as Block Kit with slack-sdk; sending,
pacing and threads belong to the notifier. Facts nobody knows are left out, never "unknown".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from models.dossier import Dossier, gpu_name, next_steps, title, workload_lines
from models.redact import redact
from models.vocabulary import Category, ComponentKind

_EMOJI: dict[str, str] = {
    Category.HARDWARE: ":rotating_light:", Category.SUSPECTED_HARDWARE: ":warning:", Category.INTERCONNECT: ":link:",
    Category.DRIVER: ":gear:", Category.APPLICATION: ":bug:", Category.THERMAL: ":fire:",
    Category.FLEET: ":globe_with_meridians:",
}
# Every class but an application fault (and an unknown one) goes to the infrastructure channel.
INFRA_CATEGORIES = frozenset({Category.HARDWARE, Category.SUSPECTED_HARDWARE, Category.INTERCONNECT, Category.DRIVER,
                              Category.THERMAL, Category.FLEET})


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
    if namespace:
        return routing.default_channel, f"no channel known for namespace {namespace}: the default"
    return routing.default_channel, "the incident names no namespace: the default channel"


def mrkdwn(text: str) -> str:
    """`text` for Slack's mrkdwn: redacted, and `&`, `<`, `>` escaped as Slack requires."""
    return redact(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True, slots=True)
class ChatContent:
    """A message's parts; every text is already mrkdwn (escaped) except `title`, plain text."""

    title: str
    headline: str
    steps: tuple[str, ...]
    fields: tuple[tuple[str, str], ...]  # (label, mrkdwn), only the known ones
    links: tuple[tuple[str, str], ...]  # (label, URL)
    context: str
    fallback: str  # the notification text and what clients without blocks show


def _where(d: Dossier) -> str:
    if d.component == ComponentKind.FLEET:  # a fleet incident is the cluster's: its nodes, not a GPU or a workload
        shown = ", ".join(d.nodes[:10]) + (" …" if len(d.nodes) > 10 else "")
        return f"cluster {d.node} · {len(d.nodes)} nodes" + (f": {shown}" if shown else "")
    parts = [d.node]
    if d.component == ComponentKind.NVSWITCH:
        parts.append(f"NVSwitch {d.gpu.pci}" if d.gpu.pci else "NVSwitch")
    else:
        if d.gpu.pci:
            parts.append(f"GPU {d.gpu.pci}")
        if d.gpu.serial:
            parts.append(f"serial {d.gpu.serial}")
        elif d.gpu.uuid:
            parts.append(d.gpu.uuid)
    return " · ".join(parts)


def message_content(d: Dossier, ticket_url: str | None = None, incident_url: str | None = None,
                    action: str | None = None) -> ChatContent:
    where = _where(d)
    fleet = d.component == ComponentKind.FLEET
    who = [f"{len(d.node_incidents)} incidents on those nodes"] if fleet else workload_lines(d)
    codes = ", ".join(f"{c.code}×{c.count}" for c in d.codes)
    actions = action or (", ".join(f"{x.action} ({x.outcome})" for x in d.actions) if d.actions else "none yet")
    steps = next_steps(d).steps
    fields = [("Where", where)]
    if who:
        fields.append(("Workload", "\n".join(who)))
    fields += [("Codes", codes), ("Seen", f"{d.count}× since {d.first_seen.isoformat()}"), ("Action taken", actions)]
    links = []
    if incident_url:
        links.append(("Incident page", incident_url))
    if ticket_url:
        links.append(("Ticket", ticket_url))
    fallback = (f"{title(d)}. {d.category}: {d.reason}. What to do now: {steps[0] if steps else 'see the incident'} "
                f"Where: {where}." + (f" Workload: {'; '.join(who)}." if who else "")
                + f" Action: {actions}." + "".join(f" {label}: {url}" for label, url in links))
    return ChatContent(
        title=redact(title(d)),
        headline=f"{_EMOJI.get(d.category, ':grey_question:')} *{mrkdwn(d.category)}*: {mrkdwn(d.reason)}",
        steps=tuple(mrkdwn(s) for s in steps),
        fields=tuple((label, mrkdwn(text)) for label, text in fields if text),
        links=tuple(links),
        context=mrkdwn(f"incident {d.incident_id} · {d.fingerprint} · catalog {d.catalog_version}"
                       + (f" · GPU {gpu_name(d)}" if gpu_name(d) and d.component != ComponentKind.FLEET else "")),
        fallback=mrkdwn(fallback),
    )
