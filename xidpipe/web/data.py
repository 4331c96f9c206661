"""What the API and the pages show, as JSON-ready values, read in one session each.

These functions run on the SQL threads (`Database.read` / `Database.write`) and call the history
queries in `history.queries`; they only shape rows into the documented objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history import queries as q
from history.remediation_store import incident_remediation
from history.tables import FaultEvent, Incident
from models.account import REQUESTED, ActionItem, decision_of
from models.dossier import render_json
from models.redact import redact
from respond.dossier_builder import build_dossier

ACTIONS_LIMIT = 200  # recorded cluster actions shown on one incident


def iso(value: datetime | date | None) -> str | None:
    return value.isoformat() if value is not None else None


def incident_json(i: Incident, actions: Sequence[ActionItem] = ()) -> dict[str, Any]:
    """An incident as the API shows it; `decision` and `cordon_requested` from its recorded actions."""
    decision, _ = decision_of(actions, i.component or "gpu")
    return {
        "incident_id": i.incident_id, "fingerprint": i.fingerprint, "node": i.node, "gpu": i.gpu,
        "gpu_uuid": i.gpu_uuid, "serial": i.serial, "pci": i.pci, "family": i.family, "status": i.status,
        "lifecycle": i.lifecycle, "category": i.category, "reason": redact(i.reason or "") or i.reason,
        "count": i.count,
        "first_seen": iso(i.first_seen), "last_seen": iso(i.last_seen), "opened_at": iso(i.opened_at),
        "updated_at": iso(i.updated_at), "resolved_at": iso(i.resolved_at),
        "previous_incident_id": i.previous_incident_id, "codes": [str(c) for c in i.codes or []],
        "pods": [str(p) for p in i.pods or []], "processes": [redact(str(p)) for p in i.processes or []],
        "workloads": [str(w) for w in i.workloads or []], "immediate_action": i.immediate_action,
        "investigatory_action": i.investigatory_action, "cordon_requested": decision in REQUESTED,
        "decision": decision.value, "merged_into": i.merged_into,
        "component": i.component or "gpu", "component_id": i.component_id,
        "nodes": [str(n) for n in i.nodes or []],
    }


def event_json(e: FaultEvent) -> dict[str, Any]:
    """A fault event of the timeline; its message and process name redacted as the dossier's are."""
    return {"id": e.id, "at": iso(e.occurred_at), "code": e.code, "family": e.family, "sources": e.sources,
            "gpu": e.gpu, "pid": e.pid, "process": redact(e.process) if e.process else e.process, "pod": e.pod,
            "namespace": e.namespace, "workload": e.workload, "message": redact(e.message) if e.message else e.message}


def list_incidents(s: Session, f: q.IncidentFilter, sort: q.SortKey, limit: int, offset: int) -> dict[str, Any]:
    rows, total = q.list_incidents(s, f, sort=sort, limit=limit, offset=offset)
    actions = _actions_of(s, [i.incident_id for i in rows])
    return {"total": total, "limit": limit, "offset": offset,
            "incidents": [incident_json(i, actions.get(i.incident_id, [])) for i in rows]}


def _actions_of(s: Session, incident_ids: Sequence[str]) -> dict[str, list[ActionItem]]:
    """The cluster actions the responder recorded for these incidents (its `actions` table, if any), the
    latest `ACTIONS_LIMIT` of each, oldest first."""
    from history.action_tables import actions_table
    from respond.dossier_builder import action_items

    bind = s.get_bind()
    if not incident_ids or not sa.inspect(bind).has_table("actions"):
        return {}
    rows = s.execute(sa.select(actions_table).where(actions_table.c.incident_id.in_(list(incident_ids)))
                     .order_by(actions_table.c.at.desc())).all()
    out: dict[str, list[ActionItem]] = {}
    for i in incident_ids:
        mine = [r for r in rows if r.incident_id == i][:ACTIONS_LIMIT]
        out[i] = action_items(list(reversed(mine)), i)
    return out


def _actions(s: Session, incident_id: str) -> list[ActionItem]:
    return _actions_of(s, [incident_id]).get(incident_id, [])


def transition_json(t: dict[str, Any]) -> dict[str, Any]:
    at = t.get("at")
    return {"incident_id": t.get("incident_id"), "from": t.get("from"), "to": t.get("to"),
            "at": iso(at) if isinstance(at, datetime) else at, "actor": t.get("actor"), "reason": t.get("reason")}


def incident_detail(s: Session, ident: str) -> dict[str, Any] | None:
    row = q.find_incident(s, ident)
    if row is None:
        return None
    actions = _actions(s, row.incident_id)
    dossier = render_json(build_dossier(s, row, actions))
    return {
        "incident": incident_json(row, actions),
        "dossier": dossier,
        "timeline": [event_json(e) for e in q.timeline(s, row.incident_id)],
        "transitions": [transition_json(t) for t in q.incident_transitions(s, row.incident_id)],
        "remediation": incident_remediation(s, row.incident_id),
    }


def transition(s: Session, ident: str, to: str, actor: str, reason: str) -> dict[str, Any]:
    """Raises LookupError (no such incident) or ValueError (not allowed from the current state)."""
    return transition_json(q.transition_incident(s, ident, to, actor=actor, reason=reason))


def stats(s: Session, since: datetime | None, top: int) -> dict[str, Any]:
    return q.stats(s, since, top)


def list_gpus(s: Session, f: q.GpuFilter, limit: int, offset: int) -> dict[str, Any]:
    rows, total = q.list_gpus(s, f, limit=limit, offset=offset)
    return {"total": total, "limit": limit, "offset": offset, "gpus": [_jsonable(r) for r in rows]}


def gpu_history(s: Session, ident: str) -> dict[str, Any] | None:
    data = q.gpu_history(s, ident)
    if data is None:
        return None
    out: dict[str, Any] = _jsonable(data)
    # The history lists incidents as row dicts; the API shows them as its Incident objects.
    ids = [i["incident_id"] for i in out.get("incidents", [])]
    rows = {r.incident_id: r for r in s.scalars(sa.select(Incident).where(Incident.incident_id.in_(ids)))}
    actions = _actions_of(s, [i for i in ids if i in rows])
    out["incidents"] = [incident_json(rows[i], actions.get(i, [])) for i in ids if i in rows]
    return out


def heatmap(s: Session, since: datetime, until: datetime) -> dict[str, Any]:
    out: dict[str, Any] = _jsonable(q.heatmap(s, since, until))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Incident):
        return incident_json(value)
    return value
