"""Every configured sink of a kind, handed each notice: the ticket sinks (`TicketSinks`), the chat
sinks (`ChatSinks`) and the page sinks (`PageSinks`, maybe none), with the entry points of one sink.

Each sink decides and delivers on its own, from its own rows (`SinkStore.for_sink`): its queue,
ticket map, notification log and failures. A notice goes to every sink of its kind; the async
entry points run them at once, each in its own thread, so a tracker retrying in place never
delays another. One sink's failure is its own: a destination that refuses or is unreachable is
recorded by that sink for its retry loop, and an error that escapes a sink (a bug, the database)
is raised only after every other sink had the notice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Generic, TypeVar

from history.sink_tables import TicketRow
from respond.sinks.model import IncidentNotice
from respond.sinks.notifications import ChatNotifier, ChatOutcome
from respond.sinks.pages import PageOutcome, PageSink
from respond.sinks.tickets import TicketOutcome, TicketSink
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)
S = TypeVar("S", TicketSink, ChatNotifier, PageSink)
R = TypeVar("R")


def _raise_first(what: str, errors: list[tuple[str, BaseException]]) -> None:
    """Raise the first sink's error, after logging the others' (they are not raised)."""
    for name, exc in errors[1:]:
        log.error("%s: sink %s failed too", what, name, exc_info=exc, extra={"sink": name})
    if errors:
        raise errors[0][1]


class _Fanout(Generic[S]):
    optional = False  # a kind that may have no sink at all

    def __init__(self, sinks: Sequence[S]) -> None:
        if not sinks and not self.optional:
            raise ValueError("at least one sink")
        names = [s.name for s in sinks]
        if len(set(names)) != len(names):
            raise ValueError(f"two sinks of one kind share a name: {', '.join(names)}")
        self.sinks: tuple[S, ...] = tuple(sinks)

    def __iter__(self) -> Iterator[S]:
        return iter(self.sinks)

    def __len__(self) -> int:
        return len(self.sinks)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sinks)

    def use_metrics(self, metrics: ResponderMetrics) -> None:
        for s in self.sinks:
            s.metrics = metrics

    def _each(self, what: str, call: Callable[[S], R]) -> list[R]:
        """`call` on every sink in turn; the first error escaping one is raised after the others ran."""
        out: list[R] = []
        errors: list[tuple[str, BaseException]] = []
        for s in self.sinks:
            try:
                out.append(call(s))
            except Exception as exc:
                errors.append((s.name, exc))
        _raise_first(what, errors)
        return out

    async def _each_async(self, what: str, call: Callable[[S], Awaitable[R]]) -> list[R]:
        """`call` on every sink at once; the first error escaping one is raised after all ran."""
        results = await asyncio.gather(*(call(s) for s in self.sinks), return_exceptions=True)
        out: list[R] = []
        errors: list[tuple[str, BaseException]] = []
        for s, r in zip(self.sinks, results, strict=True):
            if isinstance(r, BaseException):
                errors.append((s.name, r))
            else:
                out.append(r)
        _raise_first(what, errors)
        return out


class TicketSinks(_Fanout[TicketSink]):
    """The ticket sinks: every notice to each tracker, each with its own queue and ticket map."""

    def enqueue(self, notice: IncidentNotice) -> None:
        self._each("ticket enqueue", lambda s: s.enqueue(notice))

    def submit(self, notice: IncidentNotice) -> list[TicketOutcome]:
        return self._each("ticket", lambda s: s.submit(notice))

    async def submit_async(self, notice: IncidentNotice) -> list[TicketOutcome]:
        return await self._each_async("ticket", lambda s: s.submit_async(notice))

    def drain(self, limit: int = 100) -> list[TicketOutcome]:
        """Every sink's due notices (`TicketSink.drain`)."""
        return [o for done in self._each("ticket drain", lambda s: s.drain(limit)) for o in done]

    async def drain_async(self, limit: int = 100) -> list[TicketOutcome]:
        done = await self._each_async("ticket drain", lambda s: asyncio.to_thread(s.drain, limit))
        return [o for outcomes in done for o in outcomes]

    def remediation_update(self, incident_id: str, marker: str, text: str, files: dict[str, bytes] | None = None,
                           resolve: bool = False) -> bool:
        """Every tracker's ticket of the incident told (`TicketSink.remediation_update`); whether any had one."""
        return any(self._each("ticket remediation update",
                              lambda s: s.remediation_update(incident_id, marker, text, files, resolve)))

    def ticket(self, incident_id: str) -> TicketRow | None:
        """The incident's ticket in the first tracker that holds one (in registration order)."""
        return next((row for s in self.sinks if (row := s.store.ticket(incident_id)) is not None), None)

    def ticket_url(self, incident_id: str) -> str | None:
        """The link chat messages give: the incident's ticket in the first tracker that holds one."""
        return next((url for s in self.sinks if (url := s.ticket_url(incident_id)) is not None), None)


class ChatSinks(_Fanout[ChatNotifier]):
    """The chat sinks: every notice to each destination, each with its own groups, log and failures."""

    def enqueue(self, notice: IncidentNotice) -> None:
        self._each("chat enqueue", lambda s: s.enqueue(notice))

    def submit(self, notice: IncidentNotice) -> list[ChatOutcome]:
        return self._each("chat", lambda s: s.submit(notice))

    async def submit_async(self, notice: IncidentNotice) -> list[ChatOutcome]:
        return await self._each_async("chat", lambda s: s.submit_async(notice))

    def tell(self, incident_id: str, key: str, text: str) -> bool:
        """One message about the incident in every chat sink (`ChatNotifier.tell`); whether any had its group."""
        return any(self._each("chat tell", lambda s: s.tell(incident_id, key, text)))

    def flush(self) -> list[ChatOutcome]:
        """Every sink's groups decided again (`ChatNotifier.flush`)."""
        return [o for done in self._each("chat flush", lambda s: s.flush()) for o in done]

    async def run(self, stop: asyncio.Event, interval_s: float = 5.0) -> None:
        """Each sink's flush loop (`ChatNotifier.run`), side by side, until `stop` is set."""
        await asyncio.gather(*(s.run(stop, interval_s) for s in self.sinks))


class PageSinks(_Fanout[PageSink]):
    """The page sinks (none when no paging destination is configured): every notice to each, each with
    its own rows of what it told."""

    optional = True

    def enqueue(self, notice: IncidentNotice) -> None:
        self._each("page enqueue", lambda s: s.enqueue(notice))

    def submit(self, notice: IncidentNotice) -> list[PageOutcome]:
        return self._each("page", lambda s: s.submit(notice))

    async def submit_async(self, notice: IncidentNotice) -> list[PageOutcome]:
        return await self._each_async("page", lambda s: s.submit_async(notice))

    def tell(self, incident_id: str, key: str, text: str) -> bool:
        """A remediation transition told to every page sink that had the incident (`PageSink.tell`)."""
        return any(self._each("page tell", lambda s: s.tell(incident_id, key, text)))

    def drain(self) -> list[PageOutcome]:
        return [o for done in self._each("page drain", lambda s: s.drain()) for o in done]

    async def run(self, stop: asyncio.Event, interval_s: float = 5.0) -> None:
        """Each sink's retry and resend loop (`PageSink.run`), side by side, until `stop` is set."""
        await asyncio.gather(*(s.run(stop, interval_s) for s in self.sinks))
