"""A card's status in the GPU ledger, from what was done about it and what is still open.

The ledger's state says where a card is (`in_service`, `missing`: its node's inventory no longer
lists it, `retired`: another card took its slot). Whether it can be trusted with work is another
question, answered from the incident history and the action record:

    faulted          an incident of the card's own (hardware, suspected hardware, interconnect) is
                     open: nobody has repaired, returned or closed it yet
    rma              an incident of the card went to RMA and has not come back (`returned`, `closed`)
    cordoned         xidpipe cordoned the card's node, and has not released it
    cordon-dry-run   the cordon was decided as a dry run: the node is *not* cordoned
    quarantined      the card itself was quarantined (a device taint) and not released

A status is the ledger's state when it is not `in_service`, then every condition that holds, joined
by commas as kubectl joins a node's (`missing,faulted,cordoned`); `ok` when none holds and the card is
in service. The reason names the incidents and actions behind each condition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from models.lifecycle import ENDS_STREAM_INCIDENT

OPEN_LIFECYCLE = frozenset({"open", "mitigated", "ticketed"})  # nobody has repaired, returned or closed it
AT_VENDOR = "rma"


@dataclass(frozen=True, slots=True)
class CardIncident:
    short_id: str
    family: str
    lifecycle: str


@dataclass(frozen=True, slots=True)
class CardStatus:
    status: str
    reason: str


def node_cordon(actions: Sequence[tuple[str, str]]) -> str | None:
    """The node's cordon from its cordon and release records, oldest first, as (action, outcome):
    `cordoned`, `cordon-dry-run` or None (never cordoned, or released since)."""
    state: str | None = None
    for action, outcome in actions:
        if action == "cordon" and outcome in ("done", "noop"):
            state = "cordoned"
        elif action == "cordon" and outcome == "dry_run" and state != "cordoned":
            state = "cordon-dry-run"
        elif action == "release" and outcome in ("done", "dry_run"):
            state = None
    return state


def card_status(ledger_state: str, incidents: Sequence[CardIncident], cordon: str | None, node: str,
                quarantined: bool = False) -> CardStatus:
    """The card's status and why (see the module). `incidents`: its hardware incidents, not merged;
    `cordon`: its node's (`node_cordon`)."""
    words: list[str] = [] if ledger_state == "in_service" else [ledger_state]
    why: list[str] = [] if ledger_state == "in_service" else [f"the ledger has it {ledger_state}"]
    faulted = [i for i in incidents if i.lifecycle in OPEN_LIFECYCLE]
    away = [i for i in incidents if i.lifecycle == AT_VENDOR]
    if faulted:
        words.append("faulted")
        why.append("open: " + ", ".join(f"{i.family} {i.short_id} ({i.lifecycle})" for i in faulted))
    if away:
        words.append("rma")
        why.append("at the vendor: " + ", ".join(f"{i.family} {i.short_id}" for i in away))
    if quarantined:
        words.append("quarantined")
        why.append("the card is quarantined")
    if cordon == "cordoned":
        words.append("cordoned")
        why.append(f"{node} is cordoned by xidpipe")
    elif cordon == "cordon-dry-run":
        words.append("cordon-dry-run")
        why.append(f"the cordon of {node} was a dry run: the node is not cordoned")
    if not words:
        done = [i for i in incidents if i.lifecycle in ENDS_STREAM_INCIDENT]
        return CardStatus("ok", "no open incident" + (f" ({len(done)} ended)" if done else ""))
    return CardStatus(",".join(words), "; ".join(why))
