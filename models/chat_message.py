"""Chat notifications for an incident: what the message says, and where it goes.

Pure: `message_content` decides the message's parts (title, category and reason, what to do now,
the facts, the links) from the dossier; `route` decides the channel. The parts are plain text with
every secret redacted, the same for every destination: each chat destination lays them out and
escapes them for its own format (Slack: Block Kit and mrkdwn, `respond.sinks.slack.blocks`). A
group's message (`GroupMessage`) and a reply in its thread (`GroupReply`) are what the notifier
hands a destination; sending, pacing and threads belong to the notifier. Facts nobody knows are
left out, never "unknown".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from models.dossier import Dossier, gpu_name, next_steps, title, workload_lines
from models.redact import redact
from models.vocabulary import Category, ComponentKind

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


@dataclass(frozen=True, slots=True)
class ChatContent:
    """What a message says about one incident: plain text, every secret redacted, not yet escaped
    for any format."""

    title: str
    category: str
    reason: str
    steps: tuple[str, ...]  # what to do now, in order
    fields: tuple[tuple[str, str], ...]  # (label, text), only the known ones
    links: tuple[tuple[str, str], ...]  # (label, URL)
    context: str  # the incident's identity: id, fingerprint, catalog, GPU
    fallback: str  # the whole message in one paragraph: the notification text, what clients without layout show


@dataclass(frozen=True, slots=True)
class GroupEntry:
    """One incident of a notification group, in two short lines (plain text, redacted)."""

    incident_id: str
    status: str  # firing, resolved
    summary: str  # where and what: "<node> GPU <gpu>: <codes> (<status>)"
    update: str  # where it stands: "<node>: <codes> (<status>, <count> in all)"
    page: str | None = None  # the incident's page, when `xidpipe serve`'s address is known


@dataclass(frozen=True, slots=True)
class GroupMessage:
    """A group's message: its latest incident in full (`content`), and every incident of the group in
    the group's order. `group_key` names the group in every message about it (its channel and its
    `group_by` labels): what a paging destination deduplicates by."""

    content: ChatContent
    entries: tuple[GroupEntry, ...]
    group_key: str = ""

    @property
    def firing(self) -> int:
        return sum(1 for e in self.entries if e.status == "firing")

    @property
    def resolved(self) -> int:
        return len(self.entries) - self.firing


@dataclass(frozen=True, slots=True)
class GroupReply:
    """A reply in a group's thread: why the group is told again (redacted), and where it stands."""

    reason: str
    group: GroupMessage


ChatMessage = GroupMessage | GroupReply


def group_entry(d: Dossier, status: str, page: str | None = None) -> GroupEntry:
    codes = ", ".join(f"{c.code}×{c.count}" for c in d.codes)
    gpu = gpu_name(d)
    return GroupEntry(incident_id=d.incident_id, status=status,
                      summary=redact(f"{d.node}{f' GPU {gpu}' if gpu else ''}: {codes} ({status})"),
                      update=redact(f"{d.node}: {codes} ({status}, {d.count} in all)"), page=page)


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
        category=redact(d.category),
        reason=redact(d.reason),
        steps=tuple(redact(s) for s in steps),
        fields=tuple((label, redact(text)) for label, text in fields if text),
        links=tuple(links),
        context=redact(f"incident {d.incident_id} · {d.fingerprint} · catalog {d.catalog_version}"
                       + (f" · GPU {gpu_name(d)}" if gpu_name(d) and d.component != ComponentKind.FLEET else "")),
        fallback=redact(fallback),
    )
