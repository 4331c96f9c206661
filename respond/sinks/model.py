"""What the sinks take from the stream: one incident snapshot with the facts routing needs."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from models.dossier import Dossier, evidence_files, severity_of
from models.ticket_policy import TicketSubject

NOTICE_SCHEMA_VERSION = 1
DOSSIER_FILES = ("dossier.md", "dossier.json")


class IncidentNotice(BaseModel):
    """The latest state of one incident, as published on the actions topic for the sinks.

    A redelivered or repeated notice is harmless: both sinks decide from the state they recorded,
    not from the number of notices they received.
    """

    model_config = ConfigDict(extra="ignore")

    schema_version: int = NOTICE_SCHEMA_VERSION
    dossier: Dossier
    node_pool: str | None = None
    previous_incident_id: str | None = Field(default=None, description="the resolved incident this one recurs after")
    namespace_meta: dict[str, str] = Field(
        default_factory=dict, description="labels and annotations of the pod's namespace (its team channel)")
    namespaces: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="labels and annotations of each affected workload's namespace, by name "
        "(`models.affected_notice`: each team's channel)")
    labels: dict[str, str] = Field(default_factory=dict, description="extra labels for grouping and silences")

    def namespace_metas(self) -> dict[str, dict[str, str]]:
        """Every namespace's labels and annotations the notice knows, the pod's own among them."""
        own = self.dossier.attribution.namespace
        return {**({own: self.namespace_meta} if own and self.namespace_meta else {}), **self.namespaces}

    @property
    def incident_id(self) -> str:
        return self.dossier.incident_id

    def attachment_names(self) -> frozenset[str]:
        return frozenset(DOSSIER_FILES) | frozenset(evidence_files(self.dossier))

    def subject(self) -> TicketSubject:
        d = self.dossier
        return TicketSubject(
            incident_id=d.incident_id, fingerprint=d.fingerprint, category=d.category, family=d.family,
            node=d.node, status=d.status, count=d.count, last_seen=d.last_seen, node_pool=self.node_pool,
            gpu_model=d.gpu.model, previous_incident_id=self.previous_incident_id,
            evidence=self.attachment_names(), severity=severity_of(d), owner=d.attribution.owner,
        )

    def alert_labels(self) -> dict[str, str]:
        """Labels for grouping and silence matchers; `severity` is the one severity table's (`models.severity`)."""
        d = self.dossier
        base = {
            "severity": severity_of(d).value,
            "incident": d.incident_id, "fingerprint": d.fingerprint, "node": d.node, "family": d.family,
            "category": d.category, "cluster": d.cluster or "", "namespace": d.attribution.namespace or "",
            "pod": d.attribution.pod or "", "pool": self.node_pool or "", "gpu_model": d.gpu.model or "",
            "gpu_uuid": d.gpu.uuid or "", "gpu_serial": d.gpu.serial or "", "pci": d.gpu.pci or "",
            "codes": ",".join(c.code for c in d.codes),
        }
        return {**base, **self.labels}

    @property
    def alert_status(self) -> str:
        return "resolved" if self.dossier.status == "resolved" else "firing"

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
