"""What a GPU node's agent publishes: topic names and the record schemas.

Every record is JSON with `schema_version`, `kind`, `node` and a `record_id`. The record id is the
deduplication key: a consumer that has seen `(kind, node, record_id)` before drops the record. For
kernel lines it is derived from the line's position in its source:

- `/dev/kmsg`: `kmsg:<boot_id>:<seq>`;
- journald: `journald:<cursor>`;
- a plain file: `file:<sha256 of the line, 16 hex>:<byte offset>`.

Records are keyed by node name on every topic, so one partition holds all of a node's records.
Bump `SCHEMA_VERSION` for any change that is not purely additive.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1

KERNEL_TOPIC = "xidpipe.node.kernel"
STATE_TOPIC = "xidpipe.node.state"
NVML_TOPIC = "xidpipe.node.nvml"
EVIDENCE_TOPIC = "xidpipe.node.evidence"
NODE_TOPICS: tuple[str, ...] = (KERNEL_TOPIC, STATE_TOPIC, NVML_TOPIC, EVIDENCE_TOPIC)


def dead_letter_topic(topic: str) -> str:
    """The dead-letter twin of a topic: undecodable records go there with the reason."""
    return f"{topic}.dlq"


DLQ_TOPICS: tuple[str, ...] = tuple(dead_letter_topic(t) for t in NODE_TOPICS)

KernelSource = Literal["kmsg", "journald", "file"]


def _now() -> datetime:
    return datetime.now(UTC)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int = SCHEMA_VERSION
    node: str
    record_id: str
    emitted_at: datetime = Field(default_factory=_now)


# --- kernel topic -----------------------------------------------------------------------------


class KernelLine(_Record):
    """One GPU-relevant kernel log record, as read (the stream parses `message`)."""

    kind: Literal["kernel_line"] = "kernel_line"
    source: KernelSource
    message: str
    fault: bool = Field(description="the pre-filter matched a fault pattern (Xid, fallen off the bus, ...)")
    boot_id: str | None = None
    seq: int | None = Field(default=None, description="kmsg sequence number within the boot")
    cursor: str | None = Field(default=None, description="journald cursor")
    file_path: str | None = None
    file_offset: int | None = Field(default=None, description="byte offset of the line in the file")
    content_hash: str | None = None
    priority: int | None = Field(default=None, description="syslog facility*8 + level")
    monotonic_us: int | None = Field(default=None, description="microseconds since boot, from kmsg")
    continuation: dict[str, str] = Field(default_factory=dict, description="kmsg KEY=value lines")
    observed_at: datetime = Field(default_factory=_now)


class KernelGap(_Record):
    """Kernel log records were lost before the agent could read them."""

    kind: Literal["kernel_gap"] = "kernel_gap"
    source: KernelSource
    boot_id: str | None = None
    after_seq: int | None = Field(default=None, description="last sequence number read before the gap")
    next_seq: int | None = Field(default=None, description="first sequence number read after the gap")
    lost: int = Field(ge=0, description="number of records lost (0 when unknown)")
    reason: Literal["overrun", "seq_jump", "truncated"]


# --- state topic ------------------------------------------------------------------------------


class MigDevice(BaseModel):
    model_config = ConfigDict(frozen=True)

    uuid: str
    index: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


class RemappedRows(BaseModel):
    model_config = ConfigDict(frozen=True)

    correctable: int
    uncorrectable: int
    pending: bool
    failure: bool


class EccCounts(BaseModel):
    model_config = ConfigDict(frozen=True)

    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None


class GpuInfo(BaseModel):
    """One GPU. Fields the device does not support are None and named in `unsupported`."""

    model_config = ConfigDict(frozen=True)

    index: int
    uuid: str
    pci_bus_id: str
    serial: str | None = None
    name: str | None = None
    vbios_version: str | None = None
    inforom_versions: dict[str, str] = Field(default_factory=dict)
    mig_mode_current: int | None = None
    mig_mode_pending: int | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    numa_node: int | None = None
    nvlink_active: tuple[bool, ...] | None = None
    ecc: EccCounts | None = None
    remapped_rows: RemappedRows | None = None
    power_limit_mw: int | None = None
    enforced_power_limit_mw: int | None = None
    temperature_shutdown_c: int | None = None
    temperature_slowdown_c: int | None = None
    unsupported: tuple[str, ...] = ()


class GpuInventory(_Record):
    kind: Literal["inventory"] = "inventory"
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    gpus: tuple[GpuInfo, ...] = ()


class GpuProcess(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu_uuid: str
    pid: int
    used_memory_bytes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    container_id: str | None = None
    pod_uid: str | None = None


class GpuProcesses(_Record):
    kind: Literal["gpu_processes"] = "gpu_processes"
    processes: tuple[GpuProcess, ...] = ()


class DeviceAssignment(BaseModel):
    """A device id the kubelet allocated to a container."""

    model_config = ConfigDict(frozen=True)

    device_id: str = Field(description="as the kubelet reports it: a GPU UUID, MIG-..., or <id>::<n>")
    gpu_id: str = Field(description="the device id without the time-slicing replica suffix")
    mig: bool = False
    replica: int | None = None
    resource_name: str
    pod: str
    namespace: str
    container: str


class PodAssignments(_Record):
    kind: Literal["pod_assignments"] = "pod_assignments"
    changed_at: datetime
    assignments: tuple[DeviceAssignment, ...] = ()
    allocatable: tuple[str, ...] = ()


class SpoolDrops(_Record):
    """The agent's disk spool was full and dropped records (never fault lines)."""

    kind: Literal["spool_drops"] = "spool_drops"
    dropped_total: int
    dropped_since_last: int


# --- nvml topic -------------------------------------------------------------------------------

NvmlEventType = Literal[
    "xid_critical",
    "double_bit_ecc",
    "single_bit_ecc",
    "gpu_unavailable",
    "recovery_action",
    "mig_config_change",
    "other",
]


class NvmlEvent(_Record):
    kind: Literal["nvml_event"] = "nvml_event"
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    event_type: NvmlEventType
    event_type_mask: int
    event_data: int
    xid: int | None = None
    gpu_instance_id: int | None = Field(default=None, description="None when not attributable to MIG")
    compute_instance_id: int | None = None
    observed_at: datetime = Field(default_factory=_now)


class GpuMissing(_Record):
    kind: Literal["gpu_missing"] = "gpu_missing"
    reason: Literal["gpu_lost", "count_dropped"]
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    expected_count: int | None = None
    observed_count: int | None = None
    observed_at: datetime = Field(default_factory=_now)


# --- evidence topic ---------------------------------------------------------------------------


class EvidenceItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    command: tuple[str, ...] = ()
    status: Literal["ok", "failed", "timeout", "absent"]
    truncated: bool = False
    size_bytes: int = Field(description="uncompressed size of the captured bytes")
    encoding: Literal["gzip+base64"] = "gzip+base64"
    data: str = ""
    detail: str | None = None


class Evidence(_Record):
    kind: Literal["evidence"] = "evidence"
    trigger_record_id: str
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    xid: int | None = None
    pid: int | None = None
    captured_at: datetime = Field(default_factory=_now)
    items: tuple[EvidenceItem, ...] = ()


NodeRecord = Annotated[
    KernelLine
    | KernelGap
    | GpuInventory
    | GpuProcesses
    | PodAssignments
    | SpoolDrops
    | NvmlEvent
    | GpuMissing
    | Evidence,
    Field(discriminator="kind"),
]

_ADAPTER: TypeAdapter[NodeRecord] = TypeAdapter(NodeRecord)

TOPIC_FOR_KIND: dict[str, str] = {
    "kernel_line": KERNEL_TOPIC,
    "kernel_gap": KERNEL_TOPIC,
    "inventory": STATE_TOPIC,
    "gpu_processes": STATE_TOPIC,
    "pod_assignments": STATE_TOPIC,
    "spool_drops": STATE_TOPIC,
    "nvml_event": NVML_TOPIC,
    "gpu_missing": NVML_TOPIC,
    "evidence": EVIDENCE_TOPIC,
}


def topic_for(record: NodeRecord) -> str:
    return TOPIC_FOR_KIND[record.kind]


def decode_node_record(data: bytes | str) -> NodeRecord:
    """Decode one record; raises pydantic.ValidationError for anything that is not a node record."""
    return _ADAPTER.validate_json(data)


def encode_node_record(record: NodeRecord) -> bytes:
    return record.model_dump_json().encode()
