"""Action requests: what the responder is asked to do about an incident, built here and nowhere else.

The stream writes them to its outbox in the transaction that decided them; the responder acts on
them (the cordon policy, the ticket sink, the chat notifier). Each carries an idempotency key, so a
request decided again (a redelivered batch) is not written twice.

- `action_requests`: the requests of one incident change (a GPU's, an NVSwitch's, a node's, a
  workload's, a fleet incident's): a cordon candidate on every change but a resolution (never for a
  workload or fleet incident), a ticket and a notification when an incident opens or reopens, a
  notification when it is resolved or reclassified (and a ticket comment for a reclassification),
  and, for a repeat published on the incidents topic, the ticket sink's chance to comment on it.
- `evidence_request`: the ticket sink refreshes a dossier's attachments when a node's evidence
  arrives for a fault already in an incident.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from models.incidents import IncidentChange

ActionKind = Literal["cordon_candidate", "ticket", "notification"]


@dataclass(frozen=True, slots=True)
class ActionRequest:
    kind: ActionKind
    # cordon_candidate: "cordon"; ticket: "create" | "reopen" | "comment:<category>" | "update:v<version>" |
    # "evidence"; notification: the change
    operation: str
    incident_id: str
    node: str
    gpu: str
    reason: str
    idempotency_key: str


# Components whose incidents are never offered a cordon: an application fault follows its workload, and a
# fleet incident is many nodes' (each node's own incident is offered).
NOT_CORDONED = ("workload", "fleet")


def action_requests(change: IncidentChange, *, version: int, repeat_published: bool = False) -> list[ActionRequest]:
    """The action requests one incident change makes (each with an idempotency key); `version` is the
    incident row's version after the change.

    Every change but a resolution offers the responder a cordon candidate (keyed by the version): the
    YAML cordon policy, evaluated there on the incident's occurrences, is the only cordon rule set,
    so a candidate it refuses is decided again at the next change. A repeat (`updated`) is published
    on the incidents topic at most once per update interval (`models.repeats.publish_change`);
    `repeat_published` says this one was, and then the ticket sink is asked to update the ticket
    (`update:v<version>`): it decides whether that makes a (rate-limited) comment or nothing.
    """
    inc = change.incident
    out: list[ActionRequest] = []

    def add(kind: ActionKind, operation: str, reason: str, key: str | None = None) -> None:
        out.append(_request(kind, operation, inc.incident_id, inc.node, inc.gpu, reason, key))

    # The cordon request goes first: it is the one action with a deadline (new work must stop landing
    # on the GPU within a second); tickets and messages can follow it.
    if change.kind != "resolved" and inc.component not in NOT_CORDONED:
        add("cordon_candidate", "cordon", f"{change.kind}: {change.reason}",
            f"{inc.incident_id}:cordon_candidate:v{version}")
    if change.kind in ("opened", "reopened"):
        add("ticket", "create" if change.kind == "opened" else "reopen", change.reason)
        add("notification", change.kind, change.reason)
    elif change.kind == "resolved":
        add("notification", "resolved", change.reason)
    elif change.kind == "reclassified":
        add("notification", "reclassified", change.reason)
        add("ticket", f"comment:{inc.category}", change.reason)
    elif change.kind == "updated" and repeat_published:
        add("ticket", f"update:v{version}", change.reason)
    return out


def evidence_request(incident_id: str, node: str, gpu: str, evidence_record_id: str) -> ActionRequest:
    """Evidence a node captured arrived for a fault already in the incident: the ticket sink attaches
    the refreshed dossier (one request per evidence record)."""
    return _request("ticket", "evidence", incident_id, node, gpu, "evidence arrived",
                    f"{incident_id}:ticket:evidence:{evidence_record_id}")


def _request(kind: ActionKind, operation: str, incident_id: str, node: str, gpu: str, reason: str,
             key: str | None = None) -> ActionRequest:
    return ActionRequest(kind, operation, incident_id, node, gpu, reason,
                         key or f"{incident_id}:{kind}:{operation}")


def action_to_dict(a: ActionRequest) -> dict[str, Any]:
    return {"kind": a.kind, "operation": a.operation, "incident_id": a.incident_id, "node": a.node, "gpu": a.gpu,
            "reason": a.reason, "idempotency_key": a.idempotency_key}
