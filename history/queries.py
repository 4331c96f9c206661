"""Read the incident history the stream pipeline writes (SQLite by default, PostgreSQL in production).

The CLI (`xidpipe incidents`, `xidpipe gpus`, `xidpipe stats`) and the HTTP API ask through these
functions. Each answers in a few indexed queries (see migration 0002), never by loading a table
into Python. Nothing here commits: `transition_incident` leaves that to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session, aliased

from history.gpus import GpuFilter, find_card, gpu_history, list_gpus
from history.incident_ids import CANDIDATES, AmbiguousIdent, find_incident, resolve_incident, short_ids
from history.stats import heatmap, stats
from history.tables import FaultEvent, GpuCard, GpuPlacement, Incident, IncidentCode, IncidentNamespace
from history.transitions import TransitionError, apply_transition, incident_transitions
from models.vocabulary import HARDWARE_CATEGORIES

__all__ = [
    "HARDWARE_CATEGORIES",
    "AmbiguousIdent",
    "GpuFilter",
    "IncidentFilter",
    "SortKey",
    "TransitionError",
    "count_incidents",
    "find_card",
    "find_incident",
    "gpu_history",
    "heatmap",
    "incident_transitions",
    "list_gpus",
    "list_incidents",
    "resolve_card",
    "resolve_incident",
    "short_ids",
    "stats",
    "timeline",
    "transition_incident",
]

SortKey = Literal["first_seen", "last_seen", "count"]
Merged = Literal["hide", "include", "only"]
_FEW_MATCHES = 500  # up to this many matches, a page is cut from their keys (see `list_incidents`)


@dataclass(frozen=True, slots=True)
class IncidentFilter:
    node: str | None = None
    gpu: str | None = None  # serial, UUID or PCI address
    xid: int | None = None  # a bare number: the Xid or the SXid of it (`models.code_query`)
    codes: tuple[str, ...] = ()  # codes as shown (`Xid 48`, `SXid 12028`): any of them
    category: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    namespace: str | None = None
    owner: str | None = None  # a part of a workload name: `<namespace>/<owner>/<container>`
    lifecycle: str | None = None  # open, mitigated, ticketed, repaired, rma, returned, closed
    component: str | None = None  # gpu, nvswitch, node, workload, fleet
    # An incident merged into another (its faults found to be that one's) is a shell: hidden, shown
    # beside the others ("include"), or alone ("only").
    merged: Merged = "hide"


def filter_codes(f: IncidentFilter) -> tuple[str, ...]:
    """The codes `f` asks for, as stored: its `codes`, and for a bare `xid` the Xid and SXid of it."""
    bare = (f"Xid {f.xid}", f"SXid {f.xid}") if f.xid is not None else ()
    return tuple(dict.fromkeys((*f.codes, *bare)))


def _itself_or_merged(has: Any) -> Any:
    """`has(incident)` true of an incident, or of an incident merged into it: a namespace or a code the
    faults it took over brought (probed per incident through the index `has` names)."""
    shell = aliased(Incident)
    return sa.or_(has(Incident), Incident.incident_id.in_(
        sa.select(shell.merged_into).where(shell.merged_into.is_not(None), has(shell))))


def _incident_conds(f: IncidentFilter) -> list[Any]:
    conds: list[Any] = []
    if f.merged == "hide":
        conds.append(Incident.merged_into.is_(None))
    elif f.merged == "only":
        conds.append(Incident.merged_into.is_not(None))
    if f.node:
        conds.append(Incident.node == f.node)
    if f.gpu:
        conds.append(sa.or_(Incident.serial == f.gpu, Incident.gpu_uuid == f.gpu, Incident.pci == f.gpu.lower(),
                            Incident.gpu == f.gpu))
    if f.category:
        conds.append(Incident.category == f.category)
    if f.status:
        conds.append(Incident.status == f.status)
    if f.lifecycle:
        conds.append(Incident.lifecycle == f.lifecycle)
    if f.component:
        conds.append(Incident.component == f.component)
    if f.since:
        conds.append(Incident.last_seen >= f.since)
    if f.until:
        conds.append(Incident.first_seen < f.until)
    codes = filter_codes(f)
    if codes:  # the incident's codes, one row each, probed through (code, incident_id)
        conds.append(_itself_or_merged(lambda i: sa.exists().where(IncidentCode.incident_id == i.incident_id,
                                                                   IncidentCode.code.in_(codes))))
    if f.namespace:  # the namespaces its faults hit, probed through (namespace, incident_id)
        ns = f.namespace
        conds.append(_itself_or_merged(lambda i: sa.exists().where(IncidentNamespace.incident_id == i.incident_id,
                                                                   IncidentNamespace.namespace == ns)))
    if f.owner:
        # The incident lists its workloads (a trigram index serves this on PostgreSQL).
        conds.append(sa.cast(Incident.workloads, sa.Text).contains(f.owner, autoescape=True))
    return conds


def _where(f: IncidentFilter) -> list[Any]:
    return _incident_conds(f)


def count_incidents(s: Session, f: IncidentFilter) -> int:
    """How many incidents match `f`."""
    return int(s.scalar(sa.select(sa.func.count()).select_from(Incident).where(*_where(f))) or 0)


def list_incidents(s: Session, f: IncidentFilter, *, sort: SortKey = "last_seen", limit: int = 50,
                   offset: int = 0) -> tuple[list[Incident], int]:
    """One page of incidents (newest first by `sort`), and how many match in all.

    When few incidents match (the count says so exactly), their keys are read first through the
    filters' own indexes and the page is cut from them: a planner that overestimates the matches
    (a substring search, say) would otherwise walk the sort column's index and filter row by row
    through most of the table to fill one page."""
    total = count_incidents(s, f)
    order = {"first_seen": Incident.first_seen, "last_seen": Incident.last_seen, "count": Incident.count}[sort]
    conds = _where(f)
    if conds and total <= _FEW_MATCHES:
        keys: list[tuple[str, Any]] = [(i, v) for i, v in s.execute(sa.select(Incident.incident_id, order)
                                                                    .where(*conds))]
        keys.sort(key=lambda k: k[0])
        keys.sort(key=lambda k: k[1], reverse=True)  # stable: by `sort` descending, then by id
        page = [k[0] for k in keys[offset:offset + limit]]
        by_id = {r.incident_id: r for r in s.scalars(sa.select(Incident).where(Incident.incident_id.in_(page)))}
        return [by_id[i] for i in page if i in by_id], total
    rows = list(s.scalars(sa.select(Incident).where(*conds).order_by(order.desc(), Incident.incident_id)
                          .limit(limit).offset(offset)))
    return rows, total


def resolve_card(s: Session, ident: str) -> str:
    """The card key `ident` names: a card key, board serial or any UUID the card had, or a prefix of
    one (`GPU-5f1c`). Raises `LookupError` or `AmbiguousIdent` as `resolve_incident` does."""
    card = find_card(s, ident)
    if card is not None:
        return card.card
    keys = set(s.scalars(sa.select(GpuCard.card).where(sa.or_(
        GpuCard.card.startswith(ident, autoescape=True), GpuCard.serial.startswith(ident, autoescape=True),
        GpuCard.uuid.startswith(ident, autoescape=True))).limit(CANDIDATES + 1)))
    keys |= set(s.scalars(sa.select(GpuPlacement.card).where(GpuPlacement.uuid.startswith(ident, autoescape=True))
                          .distinct().limit(CANDIDATES + 1)))
    if len(keys) == 1:
        return keys.pop()
    if not keys:
        raise LookupError(f"no card {ident!r} in the ledger (a serial, a UUID or a card key, or a prefix of one)")
    raise AmbiguousIdent(ident, sorted(keys), "cards")


def timeline(s: Session, incident_id: str, limit: int = 200) -> list[FaultEvent]:
    return list(s.scalars(sa.select(FaultEvent).where(FaultEvent.incident_id == incident_id)
                          .order_by(FaultEvent.occurred_at).limit(limit)))


def transition_incident(s: Session, ident: str, to: str, *, actor: str, reason: str,
                        at: datetime | None = None) -> dict[str, Any]:
    """A person's lifecycle step (repaired, rma, returned, closed) for the incident `ident` names.

    Raises `LookupError` for an unknown incident (`AmbiguousIdent` for a prefix of several) and
    `TransitionError` (a `ValueError`) for a step the rules do not allow. Flushes, never commits."""
    row = resolve_incident(s, ident)
    return apply_transition(s, row, to, actor=actor, reason=reason, at=at, by="person")
