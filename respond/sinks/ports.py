"""The three ports of the sinks, and what a destination is. A port's adapter is handed neutral content
(`TicketBody`, a document; `models.chat_message.ChatMessage`, plain parts; `PageEvent`, one event
about one incident) and renders it in its destination's format. The ticket and chat ports each
have a real adapter and an outbox one, and one contract suite
(`tests/respond/sinks/test_tracker_contract.py`, `tests/respond/sinks/test_chat_contract.py`) runs
against both; the paging port (`Pager`) has one adapter per paging destination (Alertmanager, ...),
each tested against its destination (`tests/respond/sinks/test_alertmanager.py`, ...).

Every method raises `respond.errors.TemporaryError` (try again later) or `respond.errors.PermanentError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from models.chat_message import ChatContent, ChatMessage, GroupMessage
from models.dossier import Dossier, document
from models.dossier import title as dossier_title
from models.paging import PageKind, PagePolicy, PageStatus, Step
from models.redact import redact
from models.render.doc import Block, Heading, Paragraph, Span
from models.severity import Severity
from models.ticket_policy import TicketFields


@dataclass(frozen=True, slots=True)
class TicketBody:
    """A ticket's description as a document (`models.render.doc`, every text redacted), which each
    tracker renders in its own format: Jira as wiki markup (Server and Data Center, API v2) or ADF
    (Cloud, API v3), the outbox as Markdown beside both of Jira's."""

    title: str | None  # the ticket's title, for a format whose body opens with it (Markdown)
    blocks: tuple[Block, ...]  # the body, without the title

    @classmethod
    def of(cls, dossier: Dossier) -> TicketBody:
        return cls(redact(dossier_title(dossier)), tuple(document(dossier, title_heading=False)))

    @classmethod
    def plain(cls, text: str) -> TicketBody:
        """Plain sentences, one paragraph per line."""
        return cls(None, tuple(Paragraph((Span(ln),)) for ln in text.splitlines() if ln.strip()))

    def document(self, *, title_heading: bool = False) -> list[Block]:
        """The blocks, opened with the title as a heading when `title_heading`."""
        head: list[Block] = [Heading(1, self.title)] if title_heading and self.title else []
        return [*head, *self.blocks]


@dataclass(frozen=True, slots=True)
class TicketInfo:
    key: str
    url: str | None  # the web address; None for a tracker without one (the file outbox)
    resolved: bool
    labels: frozenset[str]
    attachments: frozenset[str]


class TicketTracker(Protocol):
    name: str

    def find_by_label(self, label: str) -> list[TicketInfo]:
        """Tickets carrying `label`, oldest first (recovery of a lost map)."""
        ...

    def get(self, key: str) -> TicketInfo | None:
        ...

    def create(self, fields: TicketFields, summary: str, description: TicketBody) -> TicketInfo:
        """Open a ticket; the tracker takes `description` in its own format."""
        ...

    def add_labels(self, key: str, labels: tuple[str, ...]) -> None:
        ...

    def comment(self, key: str, body: str, marker: str) -> bool:
        """Add a comment (plain text, escaped by the tracker for its format) unless one carrying
        `marker` is already there; True when written now."""
        ...

    def attach(self, key: str, files: Mapping[str, bytes]) -> list[str]:
        """Attach the files whose names the ticket does not carry yet; the names attached now."""
        ...

    def reopen(self, key: str, transition: str) -> None:
        ...

    def resolve(self, key: str, transition: str) -> None:
        """Take the workflow transition `transition` to a done status, unless the ticket is resolved already."""
        ...

    def link(self, key: str, other_key: str, link_type: str) -> None:
        ...

    def url(self, key: str) -> str | None:
        """The issue's web address, as chat messages link it; None when the tracker has none."""
        ...


@dataclass(frozen=True, slots=True)
class Posted:
    channel: str  # as the transport names it (a Slack channel id)
    ts: str | None  # None where the transport gives none (incoming webhooks)


class ChatTransport(Protocol):
    name: str
    threads: bool  # can reply in a thread and edit a message

    def post(self, channel: str, message: ChatMessage, key: str, thread_ts: str | None = None) -> Posted:
        """Post `message` (a group's message, or a reply in the thread `thread_ts`), rendered in the
        destination's format; `key` identifies it for `find`."""
        ...

    def update(self, channel: str, ts: str, message: GroupMessage, key: str) -> None:
        """Replace the group's message `ts` with `message`."""
        ...

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        """A message posted earlier with `key` (after a timeout left it unknown whether it was)."""
        ...


@dataclass(frozen=True, slots=True)
class PageEvent:
    """One event about one incident for a paging destination (`models.paging.decide_pages`' item),
    neutral: each destination renders it its own way (Alertmanager's alert, PagerDuty's event, a
    CloudEvent). Every text is plain and redacted, not escaped."""

    id: str  # `models.paging.event_id`: stable per (incident, kind, key), so a retry carries the same id
    kind: PageKind
    incident_id: str
    alert_key: str  # the alert's identity (`models.paging.alert_key`): a reopen after a resolve is a new one
    status: PageStatus  # where the incident stands after this event
    severity: Severity  # the one table's (`models.severity`)
    started_at: datetime  # the incident's first fault
    at: datetime  # when the event was decided
    labels: Mapping[str, str]  # identity and routing (`respond.sinks.pages.page_labels`), empty values left out
    content: ChatContent  # title, reason, what to do now, the facts, the links (incident page, ticket)
    summary: tuple[tuple[str, str], ...]  # the dossier's summary, row by row
    step: Step | None = None  # for `cordon` and `remediation`
    told_labels: Mapping[str, str] | None = None  # the labels of the alert the destination holds, if other

    @property
    def firing(self) -> bool:
        return self.status == "firing"

    def link(self, label: str) -> str | None:
        return next((url for name, url in self.content.links if name == label), None)


class Pager(Protocol):
    name: str
    policy: PagePolicy  # which incidents it is told of (min severity), and how often a firing one is re-sent

    def send(self, event: PageEvent) -> None:
        """Deliver one event; safe to repeat (the destination deduplicates by the event's id or alert key)."""
        ...


Port = Literal["tickets", "chat", "pages"]
P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Destination(Generic[P]):
    """Where tickets, chat messages or pages can go: one params class and one sink class filling a port.

    `params` is validated from the sink settings: the fields `<name>_<param>` of `SinkSettings` and
    the entry `destinations.<name>`. `sink(params)` is
    the port's adapter, or None when the params leave the destination unconfigured.
    """

    name: str
    port: Port
    params: type[P]
    sink: Callable[[P], TicketTracker | ChatTransport | Pager | None]
    fallback: bool = False  # taken only when no other destination of its port is configured
