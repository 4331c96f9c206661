"""What a GPU node's agent publishes: topic names and the record schemas.

Every record is JSON with `schema_version`, `kind`, `node` and a `record_id`. The record id is the
deduplication key: a consumer that has seen `(kind, node, record_id)` before drops the record. For
kernel lines it is derived from the line's position in its source:

- `/dev/kmsg`: `kmsg:<boot_id>:<seq>`;
- journald: `journald:<cursor>`;
- a plain file: `file:<sha256 of the line, 16 hex>:<byte offset>`.

Records are keyed by node name on every topic, so one partition holds all of a node's records.
Bump `SCHEMA_VERSION` for any change that is not purely additive; new fields are optional (a record
of an older agent still decodes: `KernelLine.event_at`, `boot_time`, `GpuInventory.boot_time`,
`DeviceAssignment.pod_uid` default to None).

Two clocks travel on kernel lines: `observed_at`, when the agent read the line, and `event_at`, when
the kernel logged it (`models.event_time`). Windows, ordering and joins use the event time.

Each record kind is registered with its topic (`register_record`): the kinds of this module here, a
health signal's by `models.signals` (its records live in its own folder there, `NvmlEvent` and
`GpuMissing` in `models.signals.nvml`). This module never imports the signals: decoding, a record's
topic and spool class are read through `models.wire`, which imports both and so knows every kind.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from models.node_names import NodeName
from models.workloads import WorkloadRef

SCHEMA_VERSION = 1

KERNEL_TOPIC = "xidpipe.node.kernel"
STATE_TOPIC = "xidpipe.node.state"
NVML_TOPIC = "xidpipe.node.nvml"
EVIDENCE_TOPIC = "xidpipe.node.evidence"
# The cluster's view of each node (its GPU allocatable, its device plugin), written by the responder's
# watch, not by the node's agent: keyed by node like the others, but only the responder may write it.
KUBE_TOPIC = "xidpipe.node.kube"
AGENT_TOPICS: tuple[str, ...] = (KERNEL_TOPIC, STATE_TOPIC, NVML_TOPIC, EVIDENCE_TOPIC)  # what a node's agent writes
NODE_TOPICS: tuple[str, ...] = (*AGENT_TOPICS, KUBE_TOPIC)


def dead_letter_topic(topic: str) -> str:
    """The dead-letter twin of a topic: undecodable records go there with the reason."""
    return f"{topic}.dlq"


DLQ_TOPICS: tuple[str, ...] = tuple(dead_letter_topic(t) for t in NODE_TOPICS)

KernelSource = Literal["kmsg", "journald", "file"]


def _now() -> datetime:
    return datetime.now(UTC)


class NodeRecordBase(BaseModel):
    """What every node record carries. A kind subclasses it with `kind: Literal["<kind>"] = "<kind>"`."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: int = SCHEMA_VERSION
    node: NodeName  # an RFC 1123 subdomain (`models.node_names`): a record for `node-a/../node-b` is refused
    record_id: str
    emitted_at: datetime = Field(default_factory=_now)
    kind: str


# --- kernel topic -----------------------------------------------------------------------------


class KernelLine(NodeRecordBase):
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
    monotonic_us: int | None = Field(default=None, description="microseconds since boot (kmsg, journald)")
    continuation: dict[str, str] = Field(default_factory=dict, description="kmsg KEY=value lines")
    observed_at: datetime = Field(default_factory=_now, description="when the agent read the line")
    event_at: datetime | None = Field(
        default=None,
        description="when the kernel logged it: kmsg monotonic time + boot time, journald's realtime stamp, "
        "a file line's own wall-clock stamp (or uptime + boot time); None when the agent cannot tell",
    )
    boot_time: datetime | None = Field(
        default=None, description="the boot time of the line's boot, when known (uptime + this = wall clock)"
    )


class KernelGap(NodeRecordBase):
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

    index: int  # NVML's: what `nvidia-smi -i` and `dcgmi -i` take (the DCGM GPU id)
    uuid: str
    pci_bus_id: str
    minor_number: int | None = None  # the device file /dev/nvidia<minor>; None from agents that do not report it
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
    upstream_bridges: tuple[str, ...] = Field(
        default=(), description="the PCI bridges above the GPU, from its root port down to its parent (sysfs): "
        "a root port's AER report is the GPU's below it (models.port_reports); empty from older agents")


class GpuInventory(NodeRecordBase):
    kind: Literal["inventory"] = "inventory"
    driver_version: str | None = None
    boot_id: str | None = Field(default=None, description="the node's boot when the inventory was taken")
    boot_time: datetime | None = Field(
        default=None, description="the node's boot time: what a recorded kernel log's uptime stamps count from"
    )
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
    pod_uid: str | None = Field(default=None, description="the pod's UID, from the process's cgroup path")


class GpuProcesses(NodeRecordBase):
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
    pod_uid: str | None = Field(
        default=None,
        description="the pod's UID when the source knows it; the kubelet's PodResources v1 API names pods by "
        "namespace and name only, so the agent leaves it None",
    )


class PodAssignments(NodeRecordBase):
    kind: Literal["pod_assignments"] = "pod_assignments"
    changed_at: datetime
    assignments: tuple[DeviceAssignment, ...] = ()
    allocatable: tuple[str, ...] = ()


class PodWorkload(BaseModel):
    """One pod on the node and its workload (`models.workloads.workload_of`)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    pod: str
    uid: str | None = None
    workload: WorkloadRef


class PodWorkloads(NodeRecordBase):
    """The workloads of the node's pods that ask for a GPU, as the API server has them: a snapshot,
    published when it changes and again every `workloads_heartbeat_s` (the agent's workloads sensor)."""

    kind: Literal["pod_workloads"] = "pod_workloads"
    changed_at: datetime
    pods: tuple[PodWorkload, ...] = ()


class SpoolDrops(NodeRecordBase):
    """The agent's disk spool was full and dropped records (never fault lines)."""

    kind: Literal["spool_drops"] = "spool_drops"
    dropped_total: int
    dropped_since_last: int


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


class Evidence(NodeRecordBase):
    kind: Literal["evidence"] = "evidence"
    trigger_record_id: str
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    xid: int | None = None
    pid: int | None = None
    captured_at: datetime = Field(default_factory=_now)
    items: tuple[EvidenceItem, ...] = ()


# Any registered node record; the kinds above and those of `models.signals`.
NodeRecord = NodeRecordBase


@dataclass(frozen=True, slots=True)
class RecordKind:
    """A record kind on the wire: its schema, its topic, and whether a full spool may drop it."""

    record: type[NodeRecordBase]
    topic: str
    droppable: bool = False  # a snapshot republished periodically; events and faults never are

    @property
    def kind(self) -> str:
        return kind_of(self.record)


_KINDS: dict[str, RecordKind] = {}
_VIEW: Mapping[str, RecordKind] = MappingProxyType(_KINDS)


def kind_of(record: type[NodeRecordBase]) -> str:
    """The `kind` a record class is tagged with (the default of its `kind` literal)."""
    default = record.model_fields["kind"].default
    if not isinstance(default, str):
        raise TypeError(f"{record.__name__} needs a default for its `kind` literal")
    return default


def register_record(record: type[NodeRecordBase], topic: str, *, droppable: bool = False) -> RecordKind:
    """Make a record kind decodable and publishable on `topic`, one of the node topics.

    Registering the same kind again with the same schema and topic is a no-op; anything else is an error.
    """
    if topic not in NODE_TOPICS:
        raise ValueError(f"{topic!r} is not a node topic ({', '.join(NODE_TOPICS)})")
    entry = RecordKind(record, topic, droppable)
    existing = _KINDS.get(entry.kind)
    if existing is not None:
        if existing == entry:
            return existing
        raise ValueError(f"record kind {entry.kind!r} is already registered ({existing.record.__name__})")
    _KINDS[entry.kind] = entry
    registered_adapter.cache_clear()
    return entry


def unregister_record(kind: str) -> None:
    """Forget a record kind (tests that register a kind of their own)."""
    if _KINDS.pop(kind, None) is not None:
        registered_adapter.cache_clear()


def registered_kinds() -> Mapping[str, RecordKind]:
    """The kinds registered so far, by kind, in registration order (a read-only view)."""
    return _VIEW


@functools.cache
def registered_adapter() -> TypeAdapter[Any]:
    """The validator of the kinds registered so far, tagged by `kind`; rebuilt when a kind is registered."""
    union: Any = Union[tuple(entry.record for entry in _KINDS.values())]  # noqa: UP007
    tagged: Any = Annotated[union, Field(discriminator="kind")]
    return TypeAdapter(tagged)


def encode_node_record(record: NodeRecordBase) -> bytes:
    return record.model_dump_json().encode()


# The kinds of this module; a health signal's kinds are registered by `models.signals`.
for _record, _topic, _droppable in (
    (KernelLine, KERNEL_TOPIC, False),
    (KernelGap, KERNEL_TOPIC, False),
    (GpuInventory, STATE_TOPIC, True),
    (GpuProcesses, STATE_TOPIC, True),
    (PodAssignments, STATE_TOPIC, True),
    (PodWorkloads, STATE_TOPIC, True),
    (SpoolDrops, STATE_TOPIC, False),
    (Evidence, EVIDENCE_TOPIC, False),
):
    register_record(_record, _topic, droppable=_droppable)
