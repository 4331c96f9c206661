"""The incident lifecycle: which step may follow which, and who may take it.

    open → mitigated (cordoned) → ticketed → repaired → rma → returned / closed

The lifecycle only moves forward, but steps may be skipped: an application fault is ticketed and
never cordoned, a card may go to RMA without a repair attempt, any incident may be closed. Each
state is entered at most once, so a step recorded twice (a redelivered request) is recognisable.

`mitigated` and `ticketed` are recorded by the responder when it really cordoned the node or a
ticket exists; `repaired`, `rma`, `returned` and `closed` are taken by people, and the responder's
remediation loop records `repaired` when it returned the node to service after validation and `rma`
when its ladder marked the card for replacement. Those four also end the incident for the stream
(its `status` becomes `resolved`): a later fault of the same GPU and family opens a new incident
linked to this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

State = Literal["open", "mitigated", "ticketed", "repaired", "rma", "returned", "closed"]
Actor = Literal["person", "responder"]

STATES: tuple[State, ...] = ("open", "mitigated", "ticketed", "repaired", "rma", "returned", "closed")
BY_RESPONDER: frozenset[str] = frozenset({"mitigated", "ticketed", "repaired", "rma"})
BY_PEOPLE: tuple[State, ...] = ("repaired", "rma", "returned", "closed")
# After these the stream treats the incident as resolved.
ENDS_STREAM_INCIDENT: frozenset[str] = frozenset(BY_PEOPLE)

NEXT: dict[str, frozenset[str]] = {
    "open": frozenset({"mitigated", "ticketed", "repaired", "rma", "closed"}),
    "mitigated": frozenset({"ticketed", "repaired", "rma", "closed"}),
    "ticketed": frozenset({"repaired", "rma", "closed"}),
    "repaired": frozenset({"rma", "closed"}),
    "rma": frozenset({"returned", "closed"}),
    "returned": frozenset({"closed"}),
    "closed": frozenset(),
}


@dataclass(frozen=True, slots=True)
class TransitionDecision:
    """`allowed`: take the step. Otherwise `reason` says why not; `already` is true when the
    incident is at or past the target already (a repeated request: nothing to do, no error)."""

    allowed: bool
    reason: str
    already: bool = False


def _order(state: str) -> int:
    return STATES.index(state)


def check_transition(current: str, to: str, actor: Actor) -> TransitionDecision:
    """May `actor` move an incident in lifecycle state `current` to `to`?"""
    if to not in STATES:
        return TransitionDecision(False, f"unknown lifecycle state {to!r}: one of {', '.join(STATES)}")
    if current not in STATES:
        return TransitionDecision(False, f"the incident is in an unknown lifecycle state {current!r}")
    if actor == "person" and to not in BY_PEOPLE:
        return TransitionDecision(False, f"{to!r} is recorded by the responder (when it cordons or a ticket "
                                         f"exists); people move incidents to {', '.join(BY_PEOPLE)}")
    if actor == "responder" and to not in BY_RESPONDER:
        return TransitionDecision(False, f"the responder records only {', '.join(sorted(BY_RESPONDER))}, not {to!r}")
    if current == to:
        return TransitionDecision(False, f"the incident is {to} already", already=True)
    if to in NEXT[current]:
        return TransitionDecision(True, f"{current} → {to}")
    allowed = sorted(NEXT[current], key=_order)
    after = ", ".join(allowed) if allowed else "nothing (closed is final)"
    return TransitionDecision(False,
                              f"{current} → {to} is not allowed: from {current} an incident may move to {after}",
                              already=_order(to) < _order(current) or current == "closed")
