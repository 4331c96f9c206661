"""The registered sink destinations, the one place that imports them, and the choice among them
that `build.build_sinks` makes.

Per port (tickets, chat, pages) every configured destination is used, each a sink of its own, in
registration order; a fallback destination (the file outbox) only when no other one is configured.
(The pages port may be left with none, when a test registers no fallback for it: then nothing is
paged.)
A new destination is one folder with its params class and sink class (a `ports.Destination`) and
one entry in `DESTINATIONS`, ahead of the outbox it replaces once configured.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from respond.sinks import alertmanager, cloudevents, jira, outbox, pagerduty, slack
from respond.sinks.ports import ChatTransport, Destination, Pager, Port, TicketTracker
from respond.sinks.settings import SinkSettings

DESTINATIONS: tuple[Destination[Any], ...] = (
    jira.DESTINATION,
    slack.DESTINATION,
    alertmanager.DESTINATION,
    pagerduty.DESTINATION,
    cloudevents.DESTINATION,
    outbox.TICKETS,
    outbox.CHAT,
    outbox.PAGES,
)

OPTIONAL_PORTS: frozenset[Port] = frozenset({"pages"})  # nothing is paged unless a destination is configured
_REGISTERED: dict[tuple[Port, str], Destination[Any]] = {}


def register(destination: Destination[Any]) -> Destination[Any]:
    key = (destination.port, destination.name)
    existing = _REGISTERED.get(key)
    if existing is not None and existing != destination:
        raise ValueError(f"a {destination.port} destination {destination.name!r} is already registered")
    _REGISTERED[key] = destination
    return destination


def unregister(port: Port, name: str) -> None:
    """Remove a destination (tests that register one of their own)."""
    _REGISTERED.pop((port, name), None)


def registered(port: Port | None = None) -> tuple[Destination[Any], ...]:
    return tuple(d for d in _REGISTERED.values() if port is None or d.port == port)


def params_of(destination: Destination[Any], settings: SinkSettings) -> Any:
    """The destination's params, validated from the settings (see `ports.Destination`)."""
    return destination.params.model_validate(
        settings.params_for(destination.name))


@overload
def open_sinks(port: Literal["tickets"], settings: SinkSettings) -> list[tuple[str, TicketTracker]]: ...
@overload
def open_sinks(port: Literal["chat"], settings: SinkSettings) -> list[tuple[str, ChatTransport]]: ...
@overload
def open_sinks(port: Literal["pages"], settings: SinkSettings) -> list[tuple[str, Pager]]: ...
def open_sinks(port: Port, settings: SinkSettings) -> list[tuple[str, Any]]:
    """(name, adapter) of every configured destination of `port` in registration order; the
    fallback (the outbox) when none is configured; for pages, none when none is."""
    unknown = set(settings.destinations) - {d.name for d in _REGISTERED.values()}
    if unknown:
        raise ValueError(f"settings name sink destinations nobody registered: {', '.join(sorted(unknown))}")
    candidates = registered(port)
    for fallback in (False, True):
        opened = [(d.name, sink) for d in candidates if d.fallback is fallback
                  if (sink := d.sink(params_of(d, settings))) is not None]
        if opened:
            return opened
    if port in OPTIONAL_PORTS:
        return []
    raise ValueError(f"no {port} destination is configured and none is registered as a fallback")


for _destination in DESTINATIONS:
    register(_destination)
