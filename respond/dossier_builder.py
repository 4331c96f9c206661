"""Build an incident's fault dossier from what the stream pipeline and the actions recorded in SQL."""

from __future__ import annotations

import base64
import gzip
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.fleet_incidents import member_incidents
from history.quarantines import active_quarantines, quarantine_text
from history.tables import EvidenceRecord, FaultEvent, Incident, NodeState
from models.account import ActionItem
from models.catalog import load_catalog
from models.dossier import (
    Attribution,
    CodeInfo,
    Dossier,
    DossierGpu,
    EvidenceItem,
    HistoryItem,
    is_monitoring_tool,
)

HISTORY_LIMIT = 20


def _xid_of(code: str) -> int | None:
    parts = code.split()
    if len(parts) == 2 and parts[0] == "Xid" and parts[1].isdigit():
        return int(parts[1])
    return None


def _sxid_of(code: str) -> int | None:
    parts = code.split()
    if len(parts) == 2 and parts[0] == "SXid" and parts[1].isdigit():
        return int(parts[1])
    return None


def _codes(events: Sequence[FaultEvent], incident: Incident) -> list[CodeInfo]:
    """Each code with the catalog's guidance and the driver's own words (its first line)."""
    counts = Counter(e.code for e in events)
    first: dict[str, str] = {}
    for e in events:
        first.setdefault(e.code, e.message)
    catalog = load_catalog()
    out: list[CodeInfo] = []
    for code in list(dict.fromkeys([*(incident.codes or []), *counts])):
        xid, sxid = _xid_of(str(code)), _sxid_of(str(code))
        info = catalog.xid(xid) if xid is not None else None
        switch = catalog.sxid(sxid) if sxid is not None else None
        mnemonic = info.mnemonic if info else (switch.name if switch else None)
        description = info.description if info else (
            f"{'fatal' if switch.fatal else 'non-fatal'} NVSwitch error: {switch.klass}" if switch else None)
        out.append(CodeInfo(
            code=str(code), count=counts.get(code, 0), mnemonic=mnemonic, description=description,
            immediate_action=info.immediate_action if info else None,
            investigatory_action=info.investigatory_action if info else None,
            message=(first.get(code) or "").strip() or None,
        ))
    return out


def _attribution(events: Sequence[FaultEvent]) -> Attribution:
    """The workload at the latest fault that names one, and the latest process a fault names that
    is the workload's (a monitoring tool that tripped over the fault, such as nvidia-smi, is not)."""
    pod = next((e for e in reversed(events) if e.pod), None)
    proc = next((e for e in reversed(events)
                 if (e.process or e.pid is not None) and not is_monitoring_tool(e.process)), None)
    workload = next((e.workload for e in reversed(events) if e.workload), None)
    owner = None
    if pod is not None and isinstance(pod.attribution, dict):
        owner = pod.attribution.get("owner")
    return Attribution(
        pod=pod.pod if pod else None, namespace=pod.namespace if pod else None,
        container=pod.container if pod else None, owner=str(owner) if owner else None,
        workload=str(workload) if workload else None,
        process=proc.process if proc else None, pid=proc.pid if proc else None,
    )


def _affected(events: Sequence[FaultEvent], limit: int = HISTORY_LIMIT) -> list[Attribution]:
    """Every workload the incident's faults hit, one per pod, in the order they faulted (at most `limit`)."""
    out: dict[tuple[str | None, str], Attribution] = {}
    for e in events:
        if not e.pod or (e.namespace, e.pod) in out:
            continue
        owner = e.attribution.get("owner") if isinstance(e.attribution, dict) else None
        out[(e.namespace, e.pod)] = Attribution(pod=e.pod, namespace=e.namespace, container=e.container,
                                                owner=str(owner) if owner else None, workload=e.workload)
        if len(out) >= limit:
            break
    return list(out.values())


def _gpu(s: Session, incident: Incident) -> tuple[DossierGpu, str | None]:
    row = s.scalars(
        sa.select(NodeState).where(NodeState.node == incident.node, NodeState.kind == "inventory")
        .order_by(NodeState.valid_from.desc()).limit(1)
    ).first()
    found: dict[str, Any] = {}
    driver = None
    if row is not None:
        payload: dict[str, Any] = row.payload or {}
        driver = payload.get("driver_version")
        for g in payload.get("gpus", []):
            if (incident.gpu_uuid and g.get("uuid") == incident.gpu_uuid) or (
                incident.pci and str(g.get("pci_bus_id", "")).lower().endswith(incident.pci[-7:])
            ):
                found = g
                break
    held = active_quarantines(s, nodes=[incident.node]).get(incident.gpu_uuid or "") if incident.gpu_uuid else None
    return DossierGpu(index=_int(found.get("index")), minor_number=_int(found.get("minor_number")),
                      model=found.get("name"), uuid=incident.gpu_uuid, serial=incident.serial, pci=incident.pci,
                      numa_node=_int(found.get("numa_node")), quarantine_rule=held["rule"] if held else None,
                      quarantine=quarantine_text(held) if held else None), driver


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _evidence(s: Session, events: Sequence[FaultEvent]) -> list[EvidenceItem]:
    ids = [e.id for e in events]
    if not ids:
        return []
    out: list[EvidenceItem] = []
    for rec in s.scalars(sa.select(EvidenceRecord).where(EvidenceRecord.fault_event_id.in_(ids))):
        for item in rec.items or []:
            try:
                text = gzip.decompress(base64.b64decode(item.get("data", ""))).decode("utf-8", "replace")
            except (ValueError, OSError):
                text = ""
            out.append(EvidenceItem(name=str(item.get("name", "evidence")), source="node",
                                    captured_at=rec.captured_at, status=str(item.get("status", "ok")),
                                    content=text))
    return out


def _history(rows: Sequence[Incident]) -> list[HistoryItem]:
    return [HistoryItem(incident_id=r.incident_id, node=r.node, gpu_uuid=r.gpu_uuid, family=r.family,
                        category=r.category, first_seen=r.first_seen, status=r.status) for r in rows]


def build_dossier(s: Session, incident: Incident, actions: Sequence[ActionItem] = (),
                  cluster: str | None = None) -> Dossier:
    """The dossier of `incident` as the database knows it now."""
    if incident.component == "fleet":
        return _fleet_dossier(s, incident, actions, cluster)
    events = list(s.scalars(
        sa.select(FaultEvent).where(FaultEvent.incident_id == incident.incident_id).order_by(FaultEvent.occurred_at)
    ))
    gpu, driver = _gpu(s, incident)
    others = sa.select(Incident).where(Incident.incident_id != incident.incident_id)
    gpu_history: list[Incident] = []
    if incident.serial:
        gpu_history = list(s.scalars(others.where(Incident.serial == incident.serial)
                                     .order_by(Incident.first_seen.desc()).limit(HISTORY_LIMIT)))
    node_history = list(s.scalars(others.where(Incident.node == incident.node)
                                  .order_by(Incident.first_seen.desc()).limit(HISTORY_LIMIT)))
    return Dossier(
        incident_id=incident.incident_id, fingerprint=incident.fingerprint, cluster=cluster, node=incident.node,
        family=incident.family, category=incident.category, reason=incident.reason, status=incident.status,
        count=incident.count, first_seen=incident.first_seen, last_seen=incident.last_seen,
        codes=_codes(events, incident), catalog_version=incident.catalog_version or load_catalog().version,
        driver_version=incident.driver_version or driver, gpu=gpu, attribution=_attribution(events),
        affected=_affected(events),
        evidence=_evidence(s, events), gpu_history=_history(gpu_history), node_history=_history(node_history),
        actions=list(actions), component=incident.component or "gpu",
    )


def _fleet_dossier(s: Session, incident: Incident, actions: Sequence[ActionItem], cluster: str | None) -> Dossier:
    """A fleet incident's dossier: no GPU, no attribution; the nodes it spans and their own
    incidents, and the cluster's earlier fleet incidents."""
    earlier = list(s.scalars(sa.select(Incident).where(
        Incident.incident_id != incident.incident_id, Incident.node == incident.node, Incident.component == "fleet",
    ).order_by(Incident.first_seen.desc()).limit(HISTORY_LIMIT)))
    return Dossier(
        incident_id=incident.incident_id, fingerprint=incident.fingerprint, cluster=cluster or incident.node,
        node=incident.node, family=incident.family, category=incident.category, reason=incident.reason,
        status=incident.status, count=incident.count, first_seen=incident.first_seen, last_seen=incident.last_seen,
        codes=_codes([], incident), catalog_version=load_catalog().version, node_history=_history(earlier),
        actions=list(actions), component="fleet", nodes=[str(n) for n in incident.nodes or []],
        node_incidents=_history(member_incidents(s, incident)),
    )


def action_items(records: Sequence[Any], incident_id: str) -> list[ActionItem]:
    """The recorded cluster actions of one incident, as dossier lines: each with the action record's own
    outcome, the decision's outcome and reason, and whether it ran as a dry run."""
    out: list[ActionItem] = []
    for r in records:
        if getattr(r, "incident_id", None) != incident_id:
            continue
        at: datetime = r.at if r.at.tzinfo is not None else r.at.replace(tzinfo=UTC)  # SQLite keeps no zone
        out.append(ActionItem(at=at, action=str(r.action), outcome=str(r.outcome), actor=r.actor,
                              decision=str(r.decision) if r.decision else None, reason=str(r.reason or ""),
                              dry_run=bool(r.dry_run), detail=f"{r.decision or ''}: {r.reason}".strip(": ")))
    return out
