"""The registered sink destinations, and the choice among them that `build.build_sinks` makes.

Per port (tickets, chat) the first configured destination in registration order is used; a
fallback destination (the file outbox) only when no other one is configured. A new destination is
one module with its params class and sink class (a `ports.Destination`) and one entry in
`DESTINATIONS`, ahead of the outbox it replaces once configured.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from respond.sinks import jira, outbox, slack
from respond.sinks.ports import ChatTransport, Destination, Port, TicketTracker
from respond.sinks.settings import SinkSettings

DESTINATIONS: tuple[Destination[Any], ...] = (
    jira.DESTINATION,
    slack.DESTINATION,
    outbox.TICKETS,
    outbox.CHAT,
)

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
def open_port(port: Literal["tickets"], settings: SinkSettings) -> TicketTracker: ...
@overload
def open_port(port: Literal["chat"], settings: SinkSettings) -> ChatTransport: ...
def open_port(port: Port, settings: SinkSettings) -> TicketTracker | ChatTransport:
    """The adapter of the first configured destination of `port` (a fallback last)."""
    unknown = set(settings.destinations) - {d.name for d in _REGISTERED.values()}
    if unknown:
        raise ValueError(f"settings name sink destinations nobody registered: {', '.join(sorted(unknown))}")
    candidates = registered(port)
    for destination in (*[d for d in candidates if not d.fallback], *[d for d in candidates if d.fallback]):
        sink = destination.sink(params_of(destination, settings))
        if sink is not None:
            return sink
    raise ValueError(f"no {port} destination is configured and none is registered as a fallback")


for _destination in DESTINATIONS:
    register(_destination)
