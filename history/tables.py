"""SQL tables of the stream pipeline (SQLAlchemy declarative; no engine or session here).

- `seen_records`: every node record handled, by (node, record_id): redelivered input is dropped.
- `fault_events`: one row per fault, with its raw lines and attribution; a kernel-log Xid and the
  NVML event for the same fault share a row (`sources`).
- `incidents`: one open row per fingerprint (node, GPU, family); recurrences link to the previous.
  Fleet incidents (one fault family on many nodes, a tripped cordon breaker) are incidents of
  component `fleet` on the cluster, with the nodes they span in `nodes`.
- `evidence`: what a node captured at fault time, linked to the fault event that triggered it.
- `node_state`: inventory, identity, PodResources and process snapshots, for joins at fault time.
- `gpu_assignments`: which workload held which GPU when (from PodResources), for classification.
- `outbox`: incident updates and action requests to publish, written in the same transaction as the
  change that made them and marked sent once Kafka acknowledged them.
- `incident_codes`, `incident_namespaces`: the codes each incident has seen and the namespaces its
  faults hit, one row each, for the history's Xid and namespace filters.
- `incident_transitions`: each lifecycle step of an incident (`models.lifecycle`), with its actor.
- The GPU asset ledger (`models.ledger`): `gpu_cards` (one row per physical card, its current or
  last place and state), `gpu_placements` (card, node, PCI slot, UUID, MIG layout, VBIOS, driver,
  with a validity interval), `gpu_ledger_events` (placed, moved, replaced, returned, changed,
  missing) and `gpu_ledger_nodes` (the latest inventory applied per node).

All times are UTC. The sink tables (`history.sink_tables`) and the action record's tables
(`history.action_tables`) share this module's `metadata`; `history.schema` gathers all of them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UtcDateTime(), dict[str, Any]: sa.JSON(), list[Any]: sa.JSON(), list[str]: sa.JSON(),
    }


class SeenRecord(Base):
    __tablename__ = "seen_records"

    node: Mapped[str] = mapped_column(sa.String(253), primary_key=True)
    record_id: Mapped[str] = mapped_column(sa.String(512), primary_key=True)
    topic: Mapped[str] = mapped_column(sa.String(255))
    seen_at: Mapped[datetime]


class FaultEvent(Base):
    __tablename__ = "fault_events"
    __table_args__ = (
        sa.UniqueConstraint("node", "content_hash", name="uq_fault_events_content"),
        sa.Index("ix_fault_events_gpu_time", "node", "gpu", "occurred_at"),
        sa.Index("ix_fault_events_family_time", "family", "occurred_at"),
        sa.Index("ix_fault_events_incident_time", "incident_id", "occurred_at"),
        sa.Index("ix_fault_events_record_key", "node", "record_key"),
    )

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    node: Mapped[str] = mapped_column(sa.String(253))
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    record_id: Mapped[str] = mapped_column(sa.String(512), index=True)
    sources: Mapped[str] = mapped_column(sa.String(32))  # "kernel", "nvml" or "kernel+nvml"
    nvml_record_id: Mapped[str | None] = mapped_column(sa.String(512))
    # content hash of the other source's report merged into this event (a redelivery of it is a duplicate)
    partner_hash: Mapped[str | None] = mapped_column(sa.String(64), index=True)
    occurred_at: Mapped[datetime]
    ingested_at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(sa.String(32))
    family: Mapped[str] = mapped_column(sa.String(32))
    code: Mapped[str] = mapped_column(sa.String(64))
    xid: Mapped[int | None]
    sxid: Mapped[int | None]
    gpu: Mapped[str] = mapped_column(sa.String(128))
    gpu_uuid: Mapped[str | None] = mapped_column(sa.String(128))
    serial: Mapped[str | None] = mapped_column(sa.String(64))
    pci: Mapped[str | None] = mapped_column(sa.String(32))
    mig_uuid: Mapped[str | None] = mapped_column(sa.String(128))
    pid: Mapped[int | None]
    process: Mapped[str | None] = mapped_column(sa.String(256))
    pod: Mapped[str | None] = mapped_column(sa.String(253))
    namespace: Mapped[str | None] = mapped_column(sa.String(253))
    container: Mapped[str | None] = mapped_column(sa.String(253))
    workload: Mapped[str | None] = mapped_column(sa.String(512), index=True)
    catalog_category: Mapped[str | None] = mapped_column(sa.String(32))
    mnemonic: Mapped[str | None] = mapped_column(sa.String(256))
    immediate_action: Mapped[str | None] = mapped_column(sa.String(64))
    message: Mapped[str] = mapped_column(sa.Text)
    raw: Mapped[str] = mapped_column(sa.Text)
    attribution: Mapped[dict[str, Any]]
    incident_id: Mapped[str | None] = mapped_column(sa.String(128))
    # True when this report counted a new fault occurrence of its incident; False when it is another
    # sensor's view of the occurrence already counted (NULL: written before migration 0005, counted).
    counted: Mapped[bool | None]
    # The kernel record it is a copy of (`models.record_identity`: the monotonic stamp and text, or the kmsg
    # sequence number) and the boot it was read in: a later copy of it (kern.log and syslog) is a duplicate.
    record_key: Mapped[str | None] = mapped_column(sa.String(96))
    boot_id: Mapped[str | None] = mapped_column(sa.String(64))
    # True: a sympathetic report of its incident's hardware fault (`models.sympathetic`: the Xid 45 of a job a
    # DBE killed); its workload was affected, not at fault, and it counts towards no workload's faults.
    sympathetic: Mapped[bool | None]


class Incident(Base):
    __tablename__ = "incidents"
    __table_args__ = (
        # At most one open incident per fingerprint.
        sa.Index("uq_incidents_open_fingerprint", "fingerprint", unique=True,
                 postgresql_where=sa.text("status = 'open'"), sqlite_where=sa.text("status = 'open'")),
        sa.Index("ix_incidents_fingerprint_opened", "fingerprint", "opened_at"),
        # The history queries: pages newest first, with or without a filter; a time range is checked
        # in the index (seen from … until) without visiting the rows outside it.
        sa.Index("ix_incidents_last_seen", "last_seen", "first_seen"),
        sa.Index("ix_incidents_first_seen", "first_seen", "last_seen"),
        sa.Index("ix_incidents_category_last_seen", "category", "last_seen"),
        sa.Index("ix_incidents_status_last_seen", "status", "last_seen"),
        sa.Index("ix_incidents_lifecycle_last_seen", "lifecycle", "last_seen"),
        sa.Index("ix_incidents_serial", "serial"),
        sa.Index("ix_incidents_gpu_uuid", "gpu_uuid"),
        sa.Index("ix_incidents_pci", "pci"),
        sa.Index("ix_incidents_gpu", "gpu"),
        sa.Index("ix_incidents_component_last_seen", "component", "last_seen"),
        sa.Index("ix_incidents_merged_into", "merged_into"),  # the filters find an incident through its merged ones
    )

    incident_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(64))
    node: Mapped[str] = mapped_column(sa.String(253), index=True)
    gpu: Mapped[str] = mapped_column(sa.String(128))
    family: Mapped[str] = mapped_column(sa.String(32))
    status: Mapped[str] = mapped_column(sa.String(16))  # open, resolved: what the stream groups by
    # open, mitigated, ticketed, repaired, rma, returned, closed (models.lifecycle)
    lifecycle: Mapped[str] = mapped_column(sa.String(16), default="open", server_default="open")
    category: Mapped[str] = mapped_column(sa.String(32))
    reason: Mapped[str] = mapped_column(sa.Text)
    count: Mapped[int]
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]
    opened_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    previous_incident_id: Mapped[str | None] = mapped_column(sa.String(128))
    gpu_uuid: Mapped[str | None] = mapped_column(sa.String(128))
    serial: Mapped[str | None] = mapped_column(sa.String(64))
    pci: Mapped[str | None] = mapped_column(sa.String(32))
    codes: Mapped[list[Any]]
    pods: Mapped[list[Any]]
    processes: Mapped[list[Any]]
    workloads: Mapped[list[Any]]
    immediate_action: Mapped[str | None] = mapped_column(sa.String(64))
    investigatory_action: Mapped[str | None] = mapped_column(sa.String(128))
    description: Mapped[str | None] = mapped_column(sa.Text)
    cordon_requested: Mapped[bool] = mapped_column(default=False)
    version: Mapped[int] = mapped_column(default=1)
    # gpu, nvswitch, node, workload, fleet (models.identity) and which one: a GPU UUID (its PCI address
    # until the UUID is known), an NVSwitch's PCI address, a workload, a fault family.
    component: Mapped[str] = mapped_column(sa.String(16), default="gpu", server_default="gpu")
    component_id: Mapped[str | None] = mapped_column(sa.String(253))
    # The fault occurrence counted last: when it started and the signals (source and code) it absorbed.
    occurrence_at: Mapped[datetime | None]
    occurrence_signals: Mapped[list[Any] | None]
    # What the verdict was made with.
    catalog_version: Mapped[str | None] = mapped_column(sa.String(32))
    driver_version: Mapped[str | None] = mapped_column(sa.String(64))
    rule: Mapped[str | None] = mapped_column(sa.String(64))
    merged_into: Mapped[str | None] = mapped_column(sa.String(128))  # the incident that absorbed this one
    nodes: Mapped[list[Any] | None]  # fleet incidents: the nodes the burst (or the breaker's cordons) spans
    # The workloads the fault killed (`models.sympathetic`): namespace/pod/container, else process[pid].
    affected: Mapped[list[Any] | None]
    occurrence_pids: Mapped[list[Any] | None]  # the processes the occurrence counted last named
    # NVIDIA's current instruction for the GPU: the recovery action its latest Xid 154 decoded (GPU_RESET, ...).
    recovery_action: Mapped[str | None] = mapped_column(sa.String(32))


class EvidenceRecord(Base):
    __tablename__ = "evidence"
    __table_args__ = (sa.UniqueConstraint("node", "record_id", name="uq_evidence_record"),)

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    node: Mapped[str] = mapped_column(sa.String(253))
    record_id: Mapped[str] = mapped_column(sa.String(512))
    trigger_record_id: Mapped[str] = mapped_column(sa.String(512), index=True)
    fault_event_id: Mapped[int | None] = mapped_column(index=True)
    gpu_uuid: Mapped[str | None] = mapped_column(sa.String(128))
    pci: Mapped[str | None] = mapped_column(sa.String(32))
    xid: Mapped[int | None]
    pid: Mapped[int | None]
    captured_at: Mapped[datetime]
    manifest: Mapped[list[Any]]  # name, command, status, size, truncated, detail per item
    items: Mapped[list[Any]]  # the captured items as published (gzip+base64 data)


class NodeState(Base):
    __tablename__ = "node_state"
    __table_args__ = (sa.Index("ix_node_state_node_time", "node", "valid_from"),)

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    node: Mapped[str] = mapped_column(sa.String(253))
    kind: Mapped[str] = mapped_column(sa.String(32))  # inventory, identity, pods, processes, workloads
    record_id: Mapped[str] = mapped_column(sa.String(512))
    valid_from: Mapped[datetime]
    payload: Mapped[dict[str, Any]]


class GpuAssignment(Base):
    __tablename__ = "gpu_assignments"
    __table_args__ = (sa.Index("ix_gpu_assignments_workload_time", "workload", "seen_at"),)

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    node: Mapped[str] = mapped_column(sa.String(253))
    gpu: Mapped[str] = mapped_column(sa.String(128))
    workload: Mapped[str] = mapped_column(sa.String(512))
    pod: Mapped[str] = mapped_column(sa.String(253))
    namespace: Mapped[str] = mapped_column(sa.String(253))
    container: Mapped[str] = mapped_column(sa.String(253))
    seen_at: Mapped[datetime]


class OutboxMessage(Base):
    __tablename__ = "outbox"
    __table_args__ = (sa.Index("ix_outbox_unsent", "sent_at", "id"),)

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    idempotency_key: Mapped[str] = mapped_column(sa.String(512), unique=True)
    stream: Mapped[str] = mapped_column(sa.String(32))  # "incidents" or "actions"
    key: Mapped[str] = mapped_column(sa.String(253))
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    sent_at: Mapped[datetime | None]


class IncidentCode(Base):
    """The codes an incident has seen (`Xid 13`, `SXid 12028`, ...), one row each: the Xid filter of
    the history counts and pages incidents through `(xid, incident_id)` without reading fault events."""

    __tablename__ = "incident_codes"
    __table_args__ = (sa.Index("ix_incident_codes_xid_incident", "xid", "incident_id"),
                      sa.Index("ix_incident_codes_code_incident", "code", "incident_id"))

    incident_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    code: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    xid: Mapped[int | None]


class IncidentNamespace(Base):
    """The namespaces whose pods an incident's faults hit, one row each, for the namespace filter."""

    __tablename__ = "incident_namespaces"
    __table_args__ = (sa.Index("ix_incident_namespaces_namespace_incident", "namespace", "incident_id"),)

    incident_id: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    namespace: Mapped[str] = mapped_column(sa.String(253), primary_key=True)


class IncidentTransition(Base):
    __tablename__ = "incident_transitions"
    __table_args__ = (
        # The lifecycle only moves forward: each state is entered at most once, so a redelivered
        # transition cannot be recorded twice.
        sa.UniqueConstraint("incident_id", "to_state", name="uq_incident_transitions_to"),
        sa.Index("ix_incident_transitions_incident_at", "incident_id", "at"),
    )

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    incident_id: Mapped[str] = mapped_column(sa.String(128))
    from_state: Mapped[str] = mapped_column(sa.String(16))
    to_state: Mapped[str] = mapped_column(sa.String(16))
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(sa.String(253))
    reason: Mapped[str] = mapped_column(sa.Text)


class GpuCard(Base):
    """One physical card (`models.ledger.card_key`), where it is (or was last) and its state."""

    __tablename__ = "gpu_cards"
    __table_args__ = (
        sa.Index("ix_gpu_cards_node_slot", "node", "pci_slot"),
        sa.Index("ix_gpu_cards_serial", "serial"),
        sa.Index("ix_gpu_cards_uuid", "uuid"),
        sa.Index("ix_gpu_cards_claimed_by", "claimed_by"),
    )

    card: Mapped[str] = mapped_column(sa.String(160), primary_key=True)
    serial: Mapped[str | None] = mapped_column(sa.String(64))
    uuid: Mapped[str] = mapped_column(sa.String(128))  # the latest
    model: Mapped[str | None] = mapped_column(sa.String(128))
    state: Mapped[str] = mapped_column(sa.String(16))  # in_service, missing, retired, conflict
    node: Mapped[str] = mapped_column(sa.String(253))  # current, or last when retired
    pci_slot: Mapped[str] = mapped_column(sa.String(32))
    since: Mapped[datetime]  # in this node and slot since
    first_seen: Mapped[datetime]
    last_seen: Mapped[datetime]  # the latest inventory of its node that listed it
    missing_since: Mapped[datetime | None]
    claimed_by: Mapped[str | None] = mapped_column(sa.String(253))  # another node that lists it (a conflict)


class GpuPlacement(Base):
    __tablename__ = "gpu_placements"
    __table_args__ = (
        sa.Index("ix_gpu_placements_card_time", "card", "valid_from"),
        sa.Index("ix_gpu_placements_node_open", "node", "valid_to"),
        sa.Index("ix_gpu_placements_uuid", "uuid"),
    )

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    card: Mapped[str] = mapped_column(sa.String(160))
    node: Mapped[str] = mapped_column(sa.String(253))
    pci_slot: Mapped[str] = mapped_column(sa.String(32))
    uuid: Mapped[str] = mapped_column(sa.String(128))
    serial: Mapped[str | None] = mapped_column(sa.String(64))
    model: Mapped[str | None] = mapped_column(sa.String(128))
    mig_layout: Mapped[list[Any]]
    vbios: Mapped[str | None] = mapped_column(sa.String(64))
    driver: Mapped[str | None] = mapped_column(sa.String(64))
    valid_from: Mapped[datetime]
    valid_to: Mapped[datetime | None]  # None: still there


class GpuLedgerEvent(Base):
    __tablename__ = "gpu_ledger_events"
    __table_args__ = (
        sa.Index("ix_gpu_ledger_events_card_at", "card", "at"),
        sa.Index("ix_gpu_ledger_events_previous_card", "previous_card"),
        sa.Index("ix_gpu_ledger_events_node_at", "node", "at"),
    )

    id: Mapped[int] = mapped_column(sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    kind: Mapped[str] = mapped_column(sa.String(16))  # placed, moved, replaced, returned, changed, missing
    at: Mapped[datetime]
    card: Mapped[str] = mapped_column(sa.String(160))
    node: Mapped[str] = mapped_column(sa.String(253))
    pci_slot: Mapped[str] = mapped_column(sa.String(32))
    reason: Mapped[str] = mapped_column(sa.Text)
    previous_node: Mapped[str | None] = mapped_column(sa.String(253))
    previous_slot: Mapped[str | None] = mapped_column(sa.String(32))
    previous_card: Mapped[str | None] = mapped_column(sa.String(160))


class GpuLedgerNode(Base):
    """The time of the latest inventory applied to the ledger per node: an older or repeated one is ignored."""

    __tablename__ = "gpu_ledger_nodes"

    node: Mapped[str] = mapped_column(sa.String(253), primary_key=True)
    inventory_at: Mapped[datetime]


# Indexes the migrations create on PostgreSQL only, outside this metadata: a trigram index for the
# substring search on an incident's workloads (`xidpipe incidents list --owner`), created when the
# `pg_trgm` extension is available (the migration installs it when the database allows it).
POSTGRESQL_ONLY_INDEXES = frozenset({"ix_incidents_workloads_trgm"})

metadata = Base.metadata
