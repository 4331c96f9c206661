"""Counts and rates over the incident history: `xidpipe stats`, the API's `/api/v1/stats` and the
fleet heatmap. Each is a few aggregate queries, never a table loaded into Python."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.gpus import models_by_uuid
from history.reliability import reliability
from history.tables import FaultEvent, GpuCard, Incident, NodeState
from models.fault_rates import Span, gpu_rate, why_no_30d
from models.vocabulary import HARDWARE_CATEGORIES, ComponentKind


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
    GPU model, and the GPUs (of component gpu) and nodes with the most hardware incidents;
    `fault_events` counts the fault events (every sensor's report) by code and namespace; `gpu_rates`
    gives GPU incidents per GPU over the span the history observed and the mean time between one GPU's
    incidents, overall and by model (`models.fault_rates`; see `_gpu_rates`); `reliability` gives the
    mean time to resolve and between hardware incidents, per pool, node and card (`history.reliability`)."""
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
            "hardware_by_gpu": _counts(s, sa.select(gpu_key).where(*hw, Incident.component == ComponentKind.GPU),
                                       top),
            "hardware_by_node": _counts(s, sa.select(Incident.node).where(*hw), top),
        },
        "fault_events": {
            "total": int(events),
            "by_code": _counts(s, sa.select(FaultEvent.code).where(*ev_since)),
            "by_namespace": _counts(s, sa.select(FaultEvent.namespace).where(*ev_since), top),
        },
        "gpu_rates": _gpu_rates(s, since, inc_since),
        "reliability": reliability(s, since, top),
    }


def observed_span(s: Session, since: datetime | None) -> Span | None:
    """What the history observed: from its first record (an incident, or a node's state such as an
    inventory) to its last; from `since` when that is later. None when it holds nothing."""
    firsts = [s.scalar(sa.select(sa.func.min(Incident.first_seen))),
              s.scalar(sa.select(sa.func.min(NodeState.valid_from)))]
    lasts = [s.scalar(sa.select(sa.func.max(Incident.last_seen))),
             s.scalar(sa.select(sa.func.max(NodeState.valid_from)))]
    known_first = [_utc(t) for t in firsts if t is not None]
    known_last = [_utc(t) for t in lasts if t is not None]
    if not known_first or not known_last:
        return None
    start = max(min(known_first), _utc(since)) if since is not None else min(known_first)
    return Span(start, max(max(known_last), start))


def _gpu_rates(s: Session, since: datetime | None, inc_since: list[Any]) -> dict[str, Any]:
    """Incidents of component gpu per GPU over the observed span (`models.fault_rates`), and the mean
    time between one GPU's incidents. The GPUs are the ledger's cards not retired before the span,
    else (no ledger) the GPUs with an incident."""
    rows = s.execute(sa.select(Incident.gpu_uuid, Incident.serial, Incident.node, Incident.gpu, Incident.first_seen)
                     .where(*inc_since, Incident.component == ComponentKind.GPU)).all()
    span = observed_span(s, since)
    if span is None:
        return {"span": None, "gpus_from": None, "note": "the history holds nothing yet",
                **gpu_rate(0, {}, Span(datetime.now(UTC), datetime.now(UTC))).as_dict(), "by_model": {}}
    models = _gpu_models(s, {r[0] for r in rows if r[0]})
    times: dict[str, list[datetime]] = {}
    model_of: dict[str, str] = {}
    for uuid, serial, node, gpu, first in rows:
        key = serial or uuid or f"{node}/{gpu}"
        times.setdefault(key, []).append(_utc(first))
        model_of[key] = models.get(uuid or "", "unknown")
    fleet = _ledger_gpus(s, span.start)
    gpus_from = "ledger" if fleet else "incidents"
    if not fleet:
        for model in model_of.values():
            fleet[model] = fleet.get(model, 0) + 1
    by_model = {model: gpu_rate(n_gpus, {k: t for k, t in times.items() if model_of[k] == model}, span).as_dict()
                for model, n_gpus in sorted(fleet.items())}
    return {"span": {"from": span.start.isoformat(), "to": span.end.isoformat(), "days": round(span.days, 3)},
            "gpus_from": gpus_from, "note": why_no_30d(span),
            **gpu_rate(sum(fleet.values()), times, span).as_dict(), "by_model": by_model}


def _ledger_gpus(s: Session, start: datetime) -> dict[str, int]:
    """Cards the ledger holds in service (or missing), and those retired since `start`, by model."""
    rows = s.execute(sa.select(GpuCard.model, sa.func.count())
                     .where(sa.or_(GpuCard.state != "retired", GpuCard.last_seen >= start))
                     .group_by(GpuCard.model)).all()
    return {model or "unknown": int(n) for model, n in rows}


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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
