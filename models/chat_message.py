"""Chat notifications for an incident: what the message says, and where it goes.

Pure: `message_content` decides the message's parts (title, category, severity and reason, what to
do now, the facts, the links) from the dossier, the decision and NVIDIA's action from its account
(`models.account`), as the ticket and the page say them; `route` decides the channel. The parts are plain text with
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

from models.account import action_text, decision_text
from models.dossier import (
    Dossier,
    account_of,
    gpu_label,
    next_steps,
    severity_of,
    title,
    title_codes,
    workload_lines,
)
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
    return team_channel(namespace, namespace_meta, routing)


def team_channel(namespace: str | None, namespace_meta: Mapping[str, str], routing: Routing) -> tuple[str, str]:
    """The channel of the team that owns `namespace`, and why: the routing policy's mapping, else the
    namespace's label or annotation `team_channel_key`, else the default channel."""
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
    severity: str  # `models.severity.Severity`: critical, error, warning, info
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


@dataclass(frozen=True, slots=True)
class AffectedMessage:
    """A message to the team whose workload an incident's fault hit (`models.affected_notice`), in its
    owner's words: plain text, redacted."""

    title: str  # "Your job <workload> was killed by a hardware fault on <node>"
    text: str  # the whole notice: what hit the job, what to do, what was decided about the GPU or node
    context: str  # the incident's identity
    links: tuple[tuple[str, str], ...] = ()  # (label, URL)


ChatMessage = GroupMessage | GroupReply | AffectedMessage


def _codes_counted(d: Dossier) -> str:
    """The codes with their counts, the decisive one first."""
    counts = {c.code: c.count for c in d.codes}
    return ", ".join(f"{code}×{counts[code]}" for code in title_codes(d, limit=None))


def group_entry(d: Dossier, status: str, page: str | None = None) -> GroupEntry:
    codes = _codes_counted(d)
    gpu = gpu_label(d)
    return GroupEntry(incident_id=d.incident_id, status=status,
                      summary=redact(f"{d.node}{f' {gpu}' if gpu else ''}: {codes} ({status})"),
                      update=redact(f"{d.node}: {codes} ({status}, {d.count} in all)"), page=page)


def _where(d: Dossier) -> str:
    if d.component == ComponentKind.FLEET:  # a fleet incident is the cluster's: its nodes, not a GPU or a workload
        shown = ", ".join(d.nodes[:10]) + (" …" if len(d.nodes) > 10 else "")
        return f"cluster {d.node} · {len(d.nodes)} nodes" + (f": {shown}" if shown else "")
    parts = [d.node]
    if d.component == ComponentKind.NVSWITCH:
        parts.append(f"NVSwitch {d.gpu.pci}" if d.gpu.pci else "NVSwitch")
    else:
        label = gpu_label(d)
        if label:
            parts.append(label)
        if d.gpu.pci and "PCI" not in (label or "") and not (label or "").startswith("GPU at"):
            parts.append(f"PCI {d.gpu.pci}")
    return " · ".join(parts)


def message_content(d: Dossier, ticket_url: str | None = None, incident_url: str | None = None) -> ChatContent:
    """The message's parts: the decision and NVIDIA's action as the incident's account says them, the
    ticket's link (the tracker's issue, where it has one) and the incident's page."""
    where = _where(d)
    fleet = d.component == ComponentKind.FLEET
    who = [f"{len(d.node_incidents)} incidents on those nodes"] if fleet else workload_lines(d)
    acct = account_of(d)
    decision, action = decision_text(acct), action_text(acct)
    todo = next_steps(d)
    steps = todo.steps
    first = next((text for phase, text in todo.phased if phase != "saved"), steps[0] if steps else None)
    fields = [("Where", where)]
    if who:
        fields.append(("Workload", "\n".join(who)))
    fields += [("Codes", _codes_counted(d)), ("Seen", f"{d.count}× since {d.first_seen.isoformat()}"),
               ("Decision", decision)]
    if action:
        fields.append(("NVIDIA's action", action))
    links = []
    if incident_url:
        links.append(("Incident page", incident_url))
    if ticket_url and ticket_url != incident_url:
        links.append(("Ticket", ticket_url))
    severity = severity_of(d)
    fallback = (f"{title(d)}. {d.category} ({severity}): {d.reason}. What to do now: "
                f"{first or 'see the incident'} Where: {where}."
                + (f" {'; '.join(who)}." if who else "")
                + f" Decision: {decision}" + "".join(f" {label}: {url}" for label, url in links))
    label = gpu_label(d)
    return ChatContent(
        title=redact(title(d)),
        category=redact(d.category),
        severity=severity.value,
        reason=redact(d.reason),
        steps=tuple(redact(s) for s in steps),
        fields=tuple((label_, redact(text)) for label_, text in fields if text),
        links=tuple(links),
        context=redact(f"incident {d.incident_id} · {d.fingerprint} · catalog {d.catalog_version}"
                       + (f" · {label}" if label and d.component not in (ComponentKind.FLEET,
                                                                          ComponentKind.NVSWITCH) else "")),
        fallback=redact(fallback),
    )
