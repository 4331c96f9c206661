"""The two ports of the sinks, and what a destination is. Each port has a real adapter and an outbox
one, and one contract suite (`tests/respond/sinks/test_tracker_contract.py`,
`tests/respond/sinks/test_chat_contract.py`) runs against both.

Every method raises `respond.errors.TemporaryError` (try again later) or `respond.errors.PermanentError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel

from models.dossier import Dossier, render_adf, render_jira_wiki, render_markdown
from models.render import adf, jira_wiki
from models.render.doc import Paragraph, Span
from models.ticket_policy import TicketFields


@dataclass(frozen=True, slots=True)
class TicketBody:
    """A ticket's description in each format a tracker may need: Markdown (the outbox), wiki
    markup (Jira Server and Data Center, API v2), ADF (Jira Cloud, API v3)."""

    markdown: str
    wiki: str
    adf: dict[str, Any]

    @classmethod
    def of(cls, dossier: Dossier) -> TicketBody:
        return cls(render_markdown(dossier), render_jira_wiki(dossier), render_adf(dossier))

    @classmethod
    def plain(cls, text: str) -> TicketBody:
        """Plain sentences, one paragraph per line, escaped for each format."""
        paragraphs = [Paragraph((Span(ln),)) for ln in text.splitlines() if ln.strip()]
        return cls(text, jira_wiki.render(paragraphs), adf.plain(text))


@dataclass(frozen=True, slots=True)
class TicketInfo:
    key: str
    url: str
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

    def link(self, key: str, other_key: str, link_type: str) -> None:
        ...

    def url(self, key: str) -> str:
        ...


@dataclass(frozen=True, slots=True)
class Posted:
    channel: str  # as the transport names it (a Slack channel id)
    ts: str | None  # None where the transport gives none (incoming webhooks)


class ChatTransport(Protocol):
    name: str
    threads: bool  # can reply in a thread and edit a message

    def post(self, channel: str, message: dict[str, Any], key: str, thread_ts: str | None = None) -> Posted:
        """Post `message` (`{"text", "blocks"}`); `key` identifies it for `find`."""
        ...

    def update(self, channel: str, ts: str, message: dict[str, Any], key: str) -> None:
        ...

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        """A message posted earlier with `key` (after a timeout left it unknown whether it was)."""
        ...


Port = Literal["tickets", "chat"]
P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Destination(Generic[P]):
    """Where tickets or chat messages can go: one params class and one sink class filling a port.

    `params` is validated from the sink settings: the fields `<name>_<param>` of `SinkSettings` and
    the entry `destinations.<name>`. `sink(params)` is
    the port's adapter, or None when the params leave the destination unconfigured.
    """

    name: str
    port: Port
    params: type[P]
    sink: Callable[[P], TicketTracker | ChatTransport | None]
    fallback: bool = False  # taken only when no other destination of its port is configured
