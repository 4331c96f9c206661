"""Read the incident history the stream pipeline writes (SQLite by default, PostgreSQL in production).

The CLI (`xidpipe incidents`, `xidpipe gpus`, `xidpipe stats`) and the HTTP API ask through these
functions. Each answers in a few indexed queries (see migration 0002), never by loading a table
into Python. Nothing here commits: `transition_incident` leaves that to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.gpus import GpuFilter, find_card, gpu_history, list_gpus, models_by_uuid
from history.tables import FaultEvent, GpuCard, GpuPlacement, Incident, IncidentCode, IncidentNamespace, NodeState
from history.transitions import TransitionError, apply_transition, incident_transitions
from models.vocabulary import HARDWARE_CATEGORIES

__all__ = [
    "HARDWARE_CATEGORIES", "AmbiguousIdent", "GpuFilter", "IncidentFilter", "SortKey", "TransitionError", "find_card",
    "find_incident", "gpu_history", "heatmap", "incident_transitions", "list_gpus", "list_incidents", "resolve_card",
    "resolve_incident", "stats", "timeline", "transition_incident",
]

SortKey = Literal["first_seen", "last_seen", "count"]
_FEW_MATCHES = 500  # up to this many matches, a page is cut from their keys (see `list_incidents`)


@dataclass(frozen=True, slots=True)
class IncidentFilter:
    node: str | None = None
    gpu: str | None = None  # serial, UUID or PCI address
    xid: int | None = None
    category: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    namespace: str | None = None
    owner: str | None = None  # a part of a workload name: `<namespace>/<owner>/<container>`
    lifecycle: str | None = None  # open, mitigated, ticketed, repaired, rma, returned, closed
    component: str | None = None  # gpu, nvswitch, node, workload, fleet


def _incident_conds(f: IncidentFilter) -> list[Any]:
    conds: list[Any] = []
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
    if f.xid is not None:  # the incident's codes, one row each, probed through (xid, incident_id)
        conds.append(sa.exists().where(IncidentCode.incident_id == Incident.incident_id, IncidentCode.xid == f.xid))
    if f.namespace:  # the namespaces its faults hit, probed through (namespace, incident_id)
        conds.append(sa.exists().where(IncidentNamespace.incident_id == Incident.incident_id,
                                       IncidentNamespace.namespace == f.namespace))
    if f.owner:
        # The incident lists its workloads (a trigram index serves this on PostgreSQL).
        conds.append(sa.cast(Incident.workloads, sa.Text).contains(f.owner, autoescape=True))
    return conds


def _where(f: IncidentFilter) -> list[Any]:
    return _incident_conds(f)


def count_incidents(s: Session, f: IncidentFilter) -> int:
    """How many incidents match `f`. The Xid or the namespace alone is counted in the index of
    `incident_codes` or `incident_namespaces`, without joining every incident."""
    conds = _where(f)
    if len(conds) == 1 and f.xid is not None:
        q = sa.select(sa.func.count()).select_from(IncidentCode).where(IncidentCode.xid == f.xid)
    elif len(conds) == 1 and f.namespace:
        q = sa.select(sa.func.count()).select_from(IncidentNamespace).where(IncidentNamespace.namespace == f.namespace)
    else:
        q = sa.select(sa.func.count()).select_from(Incident).where(*conds)
    return int(s.scalar(q) or 0)


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


def find_incident(s: Session, ident: str) -> Incident | None:
    """By incident id, or by a unique prefix of it or of its fingerprint."""
    row = s.get(Incident, ident)
    if row is not None:
        return row
    matches = list(s.scalars(sa.select(Incident).where(
        sa.or_(Incident.incident_id.startswith(ident, autoescape=True),
               Incident.fingerprint.startswith(ident, autoescape=True)))
        .order_by(Incident.opened_at.desc()).limit(2)))
    return matches[0] if len(matches) == 1 else None


class AmbiguousIdent(LookupError):
    """A prefix names more than one incident or card; `candidates` lists some of them."""

    def __init__(self, ident: str, candidates: list[str], what: str = "incidents") -> None:
        more = len(candidates) > _CANDIDATES
        shown = ", ".join(candidates[:_CANDIDATES]) + (", ..." if more else "")
        super().__init__(f"{ident!r} is ambiguous: {'more than ' if more else ''}"
                         f"{min(len(candidates), _CANDIDATES)} {what} match it: {shown}")
        self.candidates = candidates


_CANDIDATES = 10


def resolve_incident(s: Session, ident: str) -> Incident:
    """The incident `ident` names: its id, or a prefix of its id or fingerprint (`v2:55b4`). Raises
    `LookupError` when none matches and `AmbiguousIdent`, with the candidates, when several do."""
    row = s.get(Incident, ident)
    if row is not None:
        return row
    matches = list(s.scalars(sa.select(Incident).where(
        sa.or_(Incident.incident_id.startswith(ident, autoescape=True),
               Incident.fingerprint.startswith(ident, autoescape=True)))
        .order_by(Incident.opened_at.desc(), Incident.incident_id).limit(_CANDIDATES + 1)))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise LookupError(f"no incident {ident!r}")
    raise AmbiguousIdent(ident, [f"{m.incident_id} ({m.node} {m.family} {m.category})" for m in matches])


def resolve_card(s: Session, ident: str) -> str:
    """The card key `ident` names: a card key, board serial or any UUID the card had, or a prefix of
    one (`GPU-5f1c`). Raises `LookupError` or `AmbiguousIdent` as `resolve_incident` does."""
    card = find_card(s, ident)
    if card is not None:
        return card.card
    keys = set(s.scalars(sa.select(GpuCard.card).where(sa.or_(
        GpuCard.card.startswith(ident, autoescape=True), GpuCard.serial.startswith(ident, autoescape=True),
        GpuCard.uuid.startswith(ident, autoescape=True))).limit(_CANDIDATES + 1)))
    keys |= set(s.scalars(sa.select(GpuPlacement.card).where(GpuPlacement.uuid.startswith(ident, autoescape=True))
                          .distinct().limit(_CANDIDATES + 1)))
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


def _counts(s: Session, q: Any, top: int | None = None) -> dict[str, int]:
    n = sa.func.count().label("n")
    rows = s.execute(q.add_columns(n).group_by(*q.selected_columns).order_by(n.desc(), *q.selected_columns)
                     .limit(top)).all()
    return {str(r[0]): int(r[-1]) for r in rows if r[0] is not None}


def _inventory_models(s: Session, uuids: set[str]) -> dict[str, str]:
    """Model names by UUID from the latest inventory of each node (when the ledger does not know them)."""
    latest = (sa.select(sa.func.max(NodeState.id)).where(NodeState.kind == "inventory")
              .group_by(NodeState.node).scalar_subquery())
    out: dict[str, str] = {}
    for payload in s.scalars(sa.select(NodeState.payload).where(NodeState.id.in_(latest))):
        for g in payload.get("gpus", []) if isinstance(payload, dict) else []:
            if g.get("uuid") in uuids and g.get("name"):
                out[g["uuid"]] = g["name"]
    return out


def _gpu_models(s: Session, uuids: set[str]) -> dict[str, str]:
    models = models_by_uuid(s, uuids)
    unknown = uuids - set(models)
    if unknown:
        models.update(_inventory_models(s, unknown))
    return models


def stats(s: Session, since: datetime | None = None, top: int = 10) -> dict[str, Any]:
    """Two sections that never mix their units, and fault rates per GPU.

    `incidents` counts incidents (a storm of a thousand lines is one) by category, component, node and
    GPU model, and the GPUs and nodes with the most hardware incidents; `fault_events` counts the fault
    events (every sensor's report) by code and namespace; `gpu_rates` gives GPU incidents per GPU per
    30 days and the mean time between one GPU's incidents, overall and by model (see `_gpu_rates`)."""
    # An incident merged into another (a job's faults found to stay with a GPU) is counted in that one.
    inc_since = [Incident.merged_into.is_(None), *([Incident.last_seen >= since] if since is not None else [])]
    ev_since = [FaultEvent.occurred_at >= since] if since is not None else []
    hw = [*inc_since, Incident.category.in_(HARDWARE_CATEGORIES)]
    incidents = s.scalar(sa.select(sa.func.count()).select_from(Incident).where(*inc_since)) or 0
    events = s.scalar(sa.select(sa.func.count()).select_from(FaultEvent).where(*ev_since)) or 0
    gpu_key = sa.func.coalesce(Incident.serial, Incident.gpu_uuid, Incident.node + "/" + Incident.gpu)
    by_uuid = s.execute(sa.select(Incident.gpu_uuid, sa.func.count()).where(*inc_since)
                        .group_by(Incident.gpu_uuid)).all()
    models = _gpu_models(s, {u for u, _ in by_uuid if u})
    by_model: dict[str, int] = {}
    for uuid, n in by_uuid:
        name = models.get(uuid or "", "unknown")
        by_model[name] = by_model.get(name, 0) + int(n)
    return {
        "since": since.isoformat() if since else None,
        "incidents": {
            "total": int(incidents),
            "by_category": _counts(s, sa.select(Incident.category).where(*inc_since)),
            "by_component": _counts(s, sa.select(Incident.component).where(*inc_since)),
            "by_node": _counts(s, sa.select(Incident.node).where(*inc_since), top),
            "by_gpu_model": dict(sorted(by_model.items(), key=lambda kv: (-kv[1], kv[0]))),
            "hardware_by_gpu": _counts(s, sa.select(gpu_key).where(*hw), top),
            "hardware_by_node": _counts(s, sa.select(Incident.node).where(*hw), top),
        },
        "fault_events": {
            "total": int(events),
            "by_code": _counts(s, sa.select(FaultEvent.code).where(*ev_since)),
            "by_namespace": _counts(s, sa.select(FaultEvent.namespace).where(*ev_since), top),
        },
        "gpu_rates": _gpu_rates(s, since, inc_since),
    }


_RATE_DAYS = 30.0
_MIN_WINDOW_DAYS = 1.0  # a rate over less than a day says nothing per 30 days


def _gpu_rates(s: Session, since: datetime | None, inc_since: list[Any]) -> dict[str, Any]:
    """Per GPU, per incident (never per line, so one storm cannot dominate):

    - `incidents_per_gpu_per_30d`: incidents of component gpu / GPUs / (window days / 30). The window
      runs from `since` (else the first incident) to the latest time the history saw (at least a day);
      the GPUs are the ledger's cards not retired before the window, else (no ledger) the GPUs with an
      incident.
    - `mean_time_between_incidents_s`: per GPU, from its first incident's start to its last's, divided
      by its incidents less one; pooled over the GPUs with two or more."""
    rows = s.execute(sa.select(Incident.gpu_uuid, Incident.serial, Incident.node, Incident.gpu, Incident.first_seen,
                               Incident.last_seen).where(*inc_since, Incident.component == "gpu")).all()
    start_end = s.execute(sa.select(sa.func.min(Incident.first_seen), sa.func.max(Incident.last_seen))
                          .where(*inc_since)).one()
    if start_end[0] is None:
        return {"window_days": None, "gpus_from": None, **_rate(0, {}, _MIN_WINDOW_DAYS), "by_model": {}}
    start = _utc(since) if since is not None else _utc(start_end[0])
    end = max(_utc(start_end[1]), start)
    days = max((end - start).total_seconds() / 86400, _MIN_WINDOW_DAYS)
    models = _gpu_models(s, {r[0] for r in rows if r[0]})
    times: dict[str, list[datetime]] = {}
    model_of: dict[str, str] = {}
    for uuid, serial, node, gpu, first, _last in rows:
        key = serial or uuid or f"{node}/{gpu}"
        times.setdefault(key, []).append(_utc(first))
        model_of[key] = models.get(uuid or "", "unknown")
    fleet = _ledger_gpus(s, start)
    gpus_from = "ledger" if fleet else "incidents"
    if not fleet:
        fleet = {}
        for model in model_of.values():
            fleet[model] = fleet.get(model, 0) + 1
    by_model = {model: _rate(n_gpus, {k: t for k, t in times.items() if model_of[k] == model}, days)
                for model, n_gpus in sorted(fleet.items())}
    return {"window_days": round(days, 2), "gpus_from": gpus_from, **_rate(sum(fleet.values()), times, days),
            "by_model": by_model}


def _rate(gpus: int, times: dict[str, list[datetime]], days: float) -> dict[str, Any]:
    n = sum(len(t) for t in times.values())
    span = sum((max(t) - min(t)).total_seconds() for t in times.values() if len(t) > 1)
    gaps = sum(len(t) - 1 for t in times.values() if len(t) > 1)
    return {"gpus": gpus, "incidents": n,
            "incidents_per_gpu_per_30d": round(n / gpus / (days / _RATE_DAYS), 3) if gpus else None,
            "mean_time_between_incidents_s": round(span / gaps, 1) if gaps else None}


def _ledger_gpus(s: Session, start: datetime) -> dict[str, int]:
    """Cards the ledger holds in service (or missing), and those retired since `start`, by model."""
    rows = s.execute(sa.select(GpuCard.model, sa.func.count())
                     .where(sa.or_(GpuCard.state != "retired", GpuCard.last_seen >= start))
                     .group_by(GpuCard.model)).all()
    return {model or "unknown": int(n) for model, n in rows}


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def heatmap(s: Session, since: datetime, until: datetime) -> dict[str, Any]:
    """Hardware incidents per node and UTC day (by first fault) in [since, until), busiest node first."""
    since, until = _utc(since), _utc(until)
    first = since.date()
    last = (until - timedelta(microseconds=1)).date()
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)] if last >= first else []
    if s.get_bind().dialect.name == "postgresql":
        day: Any = sa.func.date(sa.func.timezone("UTC", Incident.first_seen))
    else:
        day = sa.func.date(Incident.first_seen)
    rows = s.execute(sa.select(Incident.node, day, sa.func.count()).where(
        Incident.category.in_(HARDWARE_CATEGORIES), Incident.first_seen >= since, Incident.first_seen < until,
    ).group_by(Incident.node, day)).all()
    index = {d: n for n, d in enumerate(days)}
    counts: dict[str, list[int]] = {}
    for node, d, n in rows:
        key = d if isinstance(d, date) else date.fromisoformat(str(d)[:10])
        if key in index:
            counts.setdefault(node, [0] * len(days))[index[key]] += int(n)
    nodes = sorted(counts.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    return {"since": since.isoformat(), "until": until.isoformat(), "days": [d.isoformat() for d in days],
            "nodes": [{"node": node, "counts": c, "total": sum(c)} for node, c in nodes]}
