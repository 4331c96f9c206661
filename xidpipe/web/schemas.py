"""The JSON Schemas of the API's objects (OpenAPI 3.1 components). The dossier's schema comes from
its pydantic model, so it cannot drift from what `models.dossier.render_json` writes."""

from __future__ import annotations

import copy
from typing import Any

from models.account import Account, Decision
from models.dossier import Dossier
from models.lifecycle import BY_PEOPLE, STATES
from models.severity import Severity
from models.vocabulary import ComponentKind, values

LIFECYCLE: tuple[str, ...] = STATES
PEOPLES_STEPS: tuple[str, ...] = BY_PEOPLE  # what the API and the pages may move an incident to


def _s(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, **extra}


def _n(kind: str, **extra: Any) -> dict[str, Any]:
    """Nullable."""
    return {"type": [kind, "null"], **extra}


def obj(props: dict[str, Any], *, required: list[str] | None = None, closed: bool = True,
        description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props,
                           "required": list(props) if required is None else required}
    if closed:
        out["additionalProperties"] = False
    if description:
        out["description"] = description
    return out


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def arr(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


TIME = _s("string", format="date-time")
NTIME = _n("string", format="date-time")
STR, NSTR, INT, NINT = _s("string"), _n("string"), _s("integer"), _n("integer")
COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}
_GPU_RATE = {"gpus": INT, "incidents": INT, "incidents_per_gpu": _n("number"),
             "incidents_per_gpu_per_30d": _n("number"), "mean_time_between_incidents_s": _n("number")}
_FIGURES = {"incidents": _s("integer", minimum=0), "resolved": _s("integer", minimum=0),
            "mean_time_to_resolve_s": _n("number", minimum=0,
                                         description="mean seconds from the first fault to the resolution, over the "
                                         "resolved incidents (null: none resolved)"),
            "mean_time_between_incidents_s": _n("number", minimum=0,
                                                description="mean seconds between consecutive incident starts "
                                                "(null: fewer than two incidents)")}


def page(key: str, item: str) -> dict[str, Any]:
    return obj({"total": _s("integer", minimum=0, description="how many match in all"),
                "limit": _s("integer", minimum=1), "offset": _s("integer", minimum=0), key: arr(ref(item))})


def dossier_schemas() -> dict[str, Any]:
    raw = Dossier.model_json_schema(ref_template="#/components/schemas/dossier.{model}", mode="serialization")
    defs = raw.pop("$defs", {})
    out = {f"dossier.{name}": body for name, body in defs.items()}
    dossier = copy.deepcopy(raw)
    account = Account.model_json_schema(ref_template="#/components/schemas/dossier.{model}", mode="serialization")
    out.update({f"dossier.{name}": body for name, body in account.pop("$defs", {}).items()})
    account["properties"]["decision_text"] = _s("string", description="the decision in one sentence, with its reason")
    account["properties"]["action_text"] = _s("string", description="NVIDIA's action for the decisive code")
    account["required"] = sorted(account["properties"])
    out["dossier.Account"] = account
    dossier["properties"].update({
        "dossier_version": INT, "title": STR, "account": ref("dossier.Account"),
        "severity": _s("string", enum=list(values(Severity)), description="the one severity table's"),
        "what_to_do": _s("array", items=STR, description="the runbook's steps, in the operations guide's order"),
        "workload": _s("array", items=STR, description="the workload at the fault, as the ticket names it"),
    })
    dossier["required"] = sorted({*dossier.get("required", []), *dossier["properties"]})
    out["Dossier"] = dossier
    out["dossier.DossierGpu"]["properties"]["label"] = _n("string", description="the GPU as sentences name it")
    ev = out["dossier.EvidenceItem"]
    ev["properties"]["truncated"] = _s("boolean", description="content cut at the dossier's per-item cap")
    ev["properties"]["fault_lines"] = _s("array", items=STR, description="a kernel-log capture's lines of the "
                                         "fault and the GPU around it, each after its time in UTC")
    ev["properties"]["fault_lines_note"] = _s("string", description="what the fault's lines are of the capture")
    return out


def components() -> dict[str, Any]:
    incident = obj({
        "incident_id": STR, "fingerprint": STR, "node": STR, "gpu": _s("string", description="PCI address or index"),
        "gpu_uuid": NSTR, "serial": NSTR, "pci": NSTR, "family": STR,
        "status": _s("string", description="open or resolved: whether faults are still arriving"),
        "lifecycle": _s("string", enum=list(LIFECYCLE), description="where the incident is in its lifecycle"),
        "category": STR, "reason": STR, "count": INT, "first_seen": TIME, "last_seen": TIME, "opened_at": TIME,
        "updated_at": TIME, "resolved_at": NTIME, "previous_incident_id": NSTR, "codes": arr(STR), "pods": arr(STR),
        "processes": arr(STR), "workloads": arr(STR), "immediate_action": NSTR, "investigatory_action": NSTR,
        "cordon_requested": _s("boolean", description="the cordon policy asked for a cordon of the node (whatever "
                                "came of it: `decision`)"),
        "decision": _s("string", enum=list(values(Decision)), description="what the cordon decision came to, from "
                       "the action record (models.account.Decision)"),
        "merged_into": _n("string", description="the incident this one was merged into (its faults count there)"),
        "component": _s("string", enum=list(values(ComponentKind)), description="what the incident is about"),
        "component_id": _n("string", description="which one: a GPU UUID or PCI address, an NVSwitch's PCI address, "
                           "a workload, a fault family (fleet), or `breaker` (a tripped cordon breaker)"),
        "nodes": _s("array", items=STR, description="a fleet incident's nodes (its `node` is the cluster); "
                    "empty for the others"),
    })
    event = obj({"id": INT, "at": TIME, "code": STR, "family": STR, "sources": STR, "gpu": STR, "pid": NINT,
                 "process": NSTR, "pod": NSTR, "namespace": NSTR, "workload": NSTR, "message": STR})
    transition = obj({"incident_id": STR, "from": _s("string", enum=list(LIFECYCLE)),
                      "to": _s("string", enum=list(LIFECYCLE)), "at": TIME,
                      "actor": _s("string", description="the token's name, or the responder"), "reason": STR})
    card = _s("string", description="the ledger's card key: serial:<serial>, or uuid:<uuid> without a serial")
    state = _s("string", description="in_service, missing, retired or conflict (another node lists it too)")
    claimed_by = _n("string", description="in conflict: the other node that lists the card (it stays on `node` "
                    "until that node stops listing it); null otherwise")
    status = _s("string", description="ok, or what holds, comma-separated: the state when not in_service, faulted "
                "(an incident of its own is open), rma, quarantined, cordoned, cordon-dry-run (models.gpu_status)")
    vbios_from = _n("string", enum=["inventory", "evidence", None],
                    description="where the VBIOS was read: the inventory, or a fault's nvidia-smi -q")
    quarantine = {"oneOf": [{"type": "null"}, obj({
        "rule": NSTR, "effect": NSTR, "device": {"type": ["object", "null"], "description": "the DRA device: "
                                                "driver, pool, device"},
        "node": NSTR, "incident_id": NSTR, "since": TIME,
        "dry_run": _s("boolean", description="written with effect None: the policy's dry run")},
        description="the DeviceTaintRule xidpipe holds on the GPU (docs/respond.md)")],
        "description": "null: the GPU is not quarantined"}
    gpu = obj({"card": card, "serial": NSTR, "uuid": STR, "model": NSTR, "node": STR, "pci_slot": STR,
               "since": TIME, "state": state, "last_seen": TIME, "claimed_by": claimed_by,
               "incidents": _s("integer", minimum=0), "hardware_incidents": _s("integer", minimum=0),
               "status": status, "status_reason": STR, "vbios": NSTR, "vbios_from": vbios_from,
               "quarantine": quarantine})
    placement = obj({"node": STR, "pci_slot": STR, "uuid": STR, "mig_layout": arr(STR), "vbios": NSTR,
                     "vbios_from": vbios_from, "driver": NSTR, "valid_from": TIME,
                     "valid_to": _n("string", format="date-time", description="null: still there")})
    ledger_event = obj({"kind": _s("string", description="placed, moved, replaced, returned, changed, missing, "
                                   "conflict (another node lists the card), resolved (it no longer does)"),
                        "at": TIME, "card": STR, "node": STR, "pci_slot": NSTR, "reason": NSTR,
                        "previous_node": NSTR, "previous_slot": NSTR, "previous_card": NSTR})
    boolean = _s("boolean")
    remediation = obj({
        "loop_id": STR, "incident_id": STR, "node": STR, "gpu": STR, "card": STR, "pool": STR, "family": STR,
        "stage": _s("string", description="queued, evidence, draining, executing, validating, returning; final: "
                    "returned, rma, manual, cancelled, dry_run (docs/remediation.md)"),
        "remedy": _n("string", description="reset_gpu or reboot_node"), "via": NSTR,
        "reason": _s("string", description="where the loop stands and why"), "dry_run": boolean,
        "paused": boolean, "paused_by": NSTR, "cancel_requested": NSTR, "final": boolean,
        "stuck": _s("boolean", description="not final past its deadline"), "opened_at": TIME, "stage_since": TIME,
        "deadline_at": TIME, "closed_at": NTIME,
        "details": obj({}, closed=False, description="the decision, the drain's report, the evidence and "
                       "validation summaries"),
        "attempts": arr(obj({"kind": STR, "seq": INT, "via": STR, "job": STR, "outcome": STR, "validated": NSTR,
                             "reason": STR, "reserved_at": TIME, "finished_at": NTIME})),
        "transitions": arr(obj({"from": NSTR, "to": STR, "at": TIME, "actor": STR, "reason": STR})),
    }, description="a remediation loop after the cordon: its stage, its Jobs, its transitions")
    schemas: dict[str, Any] = {
        "Problem": obj({"type": STR, "title": STR, "status": INT, "detail": STR},
                       description="RFC 9457 problem details"),
        "Health": obj({"status": _s("string", enum=["ok"])}),
        "Incident": incident,
        "IncidentPage": page("incidents", "Incident"),
        "FaultEvent": event,
        "Transition": transition,
        "TransitionRequest": obj({
            "to": _s("string", enum=list(PEOPLES_STEPS),
                     description="people's steps; mitigated and ticketed are recorded by the responder"),
            "reason": _s("string", minLength=1, maxLength=2000, pattern="^[^\\u0000]*[^\\s\\u0000][^\\u0000]*$",
                         description="why; recorded with the transition"),
        }),
        "IncidentDetail": obj({"incident": ref("Incident"), "dossier": ref("Dossier"),
                               "timeline": arr(ref("FaultEvent")), "transitions": arr(ref("Transition")),
                               "remediation": arr(ref("Remediation"))}),
        "Remediation": remediation,
        "Stats": obj({
            "since": NTIME,
            "incidents": obj({"total": INT, "by_category": COUNTS, "by_component": COUNTS, "by_node": COUNTS,
                              "by_gpu_model": COUNTS, "hardware_by_gpu": COUNTS, "hardware_by_node": COUNTS},
                             description="counts of incidents (a storm of lines is one incident)"),
            "fault_events": obj({"total": INT, "by_code": COUNTS, "by_namespace": COUNTS},
                                description="counts of fault events (every report of every sensor)"),
            "gpu_rates": obj({"span": {"oneOf": [{"type": "null"}, obj({"from": TIME, "to": TIME,
                                                                           "days": _s("number")})]},
                              "gpus_from": _n("string"), "note": _n("string"), **_GPU_RATE,
                              "by_model": {"type": "object", "additionalProperties": obj(_GPU_RATE)}},
                             description="incidents of component gpu per GPU over the span the history observed "
                             "(per 30 days only for a span of 30 days or more; `note` says why not), and the mean "
                             "time between one GPU's incidents"),
            "reliability": obj({"all": obj(_FIGURES),
                                **{k: {"type": "object", "additionalProperties": obj(_FIGURES), "description": d}
                                   for k, d in (("by_pool", "every pool (the node label the cordon policy's "
                                                 "`scope.pool_label` names, as the history last recorded it; '': "
                                                 "not known)"),
                                                ("by_node", "the `top` nodes with the most incidents"),
                                                ("by_card", "the `top` GPU cards (`serial:<s>`, or `uuid:<u>` "
                                                 "without a serial) with the most incidents"))}},
                               description="fleet reliability over the hardware incidents (of a GPU, an NVSwitch "
                               "or a node) that began since `since`: the mean time to resolve and the mean time "
                               "between incidents"),
        }),
        "Gpu": gpu,
        "GpuPage": page("gpus", "Gpu"),
        "Placement": placement,
        "LedgerEvent": ledger_event,
        "GpuHistory": obj({"card": card, "serial": NSTR, "uuid": STR, "model": NSTR, "state": state, "node": STR,
                           "pci_slot": STR, "since": TIME, "first_seen": TIME, "last_seen": TIME,
                           "missing_since": NTIME, "claimed_by": claimed_by, "status": status, "status_reason": STR,
                           "placements": arr(ref("Placement")),
                           "events": arr(ref("LedgerEvent")), "incidents": arr(ref("Incident"))}),
        "Heatmap": obj({
            "since": _n("string", format="date-time", description="the window's start (null: empty window)"),
            "until": _n("string", format="date-time", description="the window's end, excluded"),
            "days": arr(_s("string", format="date")),
            "nodes": arr(obj({"node": STR, "counts": arr(_s("integer", minimum=0)),
                              "total": _s("integer", minimum=0)})),
        }, description="hardware incidents per node and UTC day (by first fault); counts[i] belongs to days[i]; "
           "busiest node first"),
    }
    schemas.update(dossier_schemas())
    return schemas
