"""Every topic of the stream pipeline, declared in one place.

Each topic has a partition count, a key and a value schema, and a dead-letter twin
(`<name>.dlq`). Four input topics carry the node agent's records (`models.node_records`), a fifth the
cluster's view of each node that the responder's watch writes (`kube`); all are keyed by node name
and share one partition count, so one partition holds everything about one node (co-partitioning:
no repartition topics). The outputs are keyed by node, except the
fleet incidents (incidents of component `fleet`), which are keyed by cluster. The responder reports
what it did with each action request on `<actions>.completed`.

Each topic also declares its broker configuration (`TopicConfig`), which `streams.topics.ensure_topics`
applies when it creates the topic and reconciles on a topic that exists: cleanup policy, retention,
the largest record, and the in-sync replicas an `acks=all` write needs.

The state topic is compacted, so its records are keyed by (node, kind) (`record_key`): compaction
keeps the latest record of each key, which is then the latest inventory, pod assignments, GPU
processes and spool drops of every node. The partition stays the node's: the agent's partitioner
hashes only the node part of a key (`key_node`), so all of one node's records share one partition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from models import node_records, wire
from models.node_names import node_name_problem

INCIDENTS_TOPIC = "xidpipe.incidents"
ACTIONS_TOPIC = "xidpipe.actions"
COMPLETED_TOPIC = f"{ACTIONS_TOPIC}.completed"  # what the responder did with each action request


DAY_MS = 86_400_000
BROKER_MAX_MESSAGE_BYTES = 1_048_588  # Kafka's default `max.message.bytes`


KEY_SEPARATOR = "/"  # never in a node name: a Kubernetes node name is an RFC 1123 subdomain
_KIND = re.compile(rb"[a-z][a-z0-9_]{0,62}")  # a record kind, the part of a state key after the node


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's broker configuration, and why."""

    cleanup_policy: str  # "delete" or "compact"
    retention_ms: int  # -1: no time limit (a compacted topic's records are never deleted by age)
    max_message_bytes: int
    reason: str
    min_compaction_lag_ms: int | None = None  # compacted topics: records younger than this are kept as written
    segment_ms: int | None = None  # compacted topics: the active segment is never compacted, so roll it this often

    def broker_configs(self, replication_factor: int) -> dict[str, str]:
        """The topic configs to set, as the broker names them."""
        configs = {"cleanup.policy": self.cleanup_policy, "retention.ms": str(self.retention_ms),
                   "max.message.bytes": str(self.max_message_bytes),
                   "min.insync.replicas": str(min_insync_replicas(replication_factor))}
        if self.min_compaction_lag_ms is not None:
            configs["min.compaction.lag.ms"] = str(self.min_compaction_lag_ms)
        if self.segment_ms is not None:
            configs["segment.ms"] = str(self.segment_ms)
        return configs


def min_insync_replicas(replication_factor: int) -> int:
    """Replicas an `acks=all` write must reach: 2 of 3 (or more) survives one broker down without losing an
    acknowledged record; with fewer replicas, 1, or one broker down would stop every write."""
    return 2 if replication_factor >= 3 else 1


# Node records: a weekend outage of the worker (Friday evening to Monday morning, ~64 h) plus a margin;
# the agent itself spools and retries for 7 days, so the topic keeps what the agent could still send.
_NODE_RETENTION_MS = 7 * DAY_MS
# Node state: compacted, but only past the same 7 days (the history window): a worker back from a weekend
# reads every state change in order, and one rebuilt from nothing still finds each node's latest state.
_STATE_HISTORY_MS = _NODE_RETENTION_MS
_STATE_SEGMENT_MS = DAY_MS  # a record is compacted 7 to 8 days after it was written, not 7 to 14
_DEAD_LETTER_RETENTION_MS = 30 * DAY_MS  # someone reads dead letters by hand, after the incident
_EVIDENCE_MAX_BYTES = 4 * 1024 * 1024  # the agent's `max_request_size`: a capture of several 256 KiB items

_CONFIGS = {
    "kernel": TopicConfig("delete", _NODE_RETENTION_MS, BROKER_MAX_MESSAGE_BYTES,
                          "events: every kernel line counts; survive a weekend outage of the worker"),
    "state": TopicConfig("compact", -1, BROKER_MAX_MESSAGE_BYTES,
                         "snapshots keyed (node, kind): every change kept for 7 days (the worker's state history, "
                         "for attribution at a fault's time), then the latest of each kind of each node for ever",
                         min_compaction_lag_ms=_STATE_HISTORY_MS, segment_ms=_STATE_SEGMENT_MS),
    "nvml": TopicConfig("delete", _NODE_RETENTION_MS, BROKER_MAX_MESSAGE_BYTES, "events"),
    "kube": TopicConfig("delete", _NODE_RETENTION_MS, BROKER_MAX_MESSAGE_BYTES,
                        "the cluster's view of each node, as it changes: kept as the agents' records are"),
    "evidence": TopicConfig("delete", _NODE_RETENTION_MS, _EVIDENCE_MAX_BYTES,
                            "records up to the agent's 4 MiB request size (nvidia-smi -q, dmesg, lspci captures)"),
    "incidents": TopicConfig("delete", _NODE_RETENTION_MS, BROKER_MAX_MESSAGE_BYTES,
                             "change events of incidents; the history is in SQL"),
    "actions": TopicConfig("delete", _NODE_RETENTION_MS, BROKER_MAX_MESSAGE_BYTES,
                           "requests: a responder down for a weekend still finds them"),
    "completed": TopicConfig("delete", _NODE_RETENTION_MS, BROKER_MAX_MESSAGE_BYTES, "results"),
}


def dead_letter_config(source: TopicConfig) -> TopicConfig:
    """A dead letter repeats the original bytes in base64 inside JSON: 4/3 of them, plus the reason."""
    return TopicConfig("delete", _DEAD_LETTER_RETENTION_MS, source.max_message_bytes * 2,
                       "kept for a month, for someone to read; twice the source's largest record")


def record_key(record: node_records.NodeRecordBase) -> str:
    """The Kafka key of a node record: `<node>/<kind>` on the compacted state topic (compaction keeps the
    latest record of each key, so each kind of each node keeps its own latest), the node on the others."""
    if wire.topic_for(record) == node_records.STATE_TOPIC:
        return f"{record.node}{KEY_SEPARATOR}{record.kind}"
    return record.node


def key_node(key: bytes) -> bytes | None:
    """The node a key names (what the agent's partitioner hashes): the key up to the separator, when
    the key is `<node>` or `<node>/<kind>` and the node part is a node name (`models.node_names`); None
    otherwise (`node-a/../node-b` names no node, not node-a)."""
    node, sep, kind = key.partition(KEY_SEPARATOR.encode())
    if sep and not _KIND.fullmatch(kind):
        return None
    try:
        text = node.decode("ascii")
    except UnicodeDecodeError:
        return None
    return node if node_name_problem(text) is None else None


def key_names_record(key: bytes | None, record: node_records.NodeRecordBase) -> bool:
    """Whether `key` is the record's key (`record_key`), or its node alone: state records written before
    they were keyed (node, kind) are keyed by node."""
    if key is None:
        return False
    text = key.decode("utf-8", "replace")
    return text == record.node or text == record_key(record)


def config_changes(wanted: dict[str, str], current: dict[str, str | None]) -> dict[str, str]:
    """The configs of `wanted` whose value on the broker (`current`) differs."""
    return {k: v for k, v in wanted.items() if current.get(k) != v}


@dataclass(frozen=True, slots=True)
class TopicSpec:
    role: str  # kernel, state, nvml, evidence, kube, incidents, actions, completed
    name: str
    partitions: int
    key: str  # what the key is: "node" or "node or cluster"
    value: str  # the schema of the value
    dead_letter: str

    @property
    def names(self) -> tuple[str, str]:
        return self.name, self.dead_letter

    @property
    def config(self) -> TopicConfig:
        return _CONFIGS[self.role]

    def broker_configs(self, replication_factor: int) -> dict[str, dict[str, str]]:
        """Per name (the topic and its dead-letter twin): the broker configs it should have."""
        return {self.name: self.config.broker_configs(replication_factor),
                self.dead_letter: dead_letter_config(self.config).broker_configs(replication_factor)}


@dataclass(frozen=True, slots=True)
class Topology:
    kernel: TopicSpec
    state: TopicSpec
    nvml: TopicSpec
    evidence: TopicSpec
    kube: TopicSpec
    incidents: TopicSpec
    actions: TopicSpec
    completed: TopicSpec

    @property
    def inputs(self) -> tuple[TopicSpec, ...]:
        """What the stream worker reads."""
        return self.kernel, self.state, self.nvml, self.evidence, self.kube

    @property
    def agent_inputs(self) -> tuple[TopicSpec, ...]:
        """What a node's agent writes (and the worker checks its node identity on)."""
        return self.kernel, self.state, self.nvml, self.evidence

    @property
    def outputs(self) -> tuple[TopicSpec, ...]:
        return self.incidents, self.actions

    @property
    def all(self) -> tuple[TopicSpec, ...]:
        return (*self.inputs, *self.outputs, self.completed)

    def by_name(self, name: str) -> TopicSpec | None:
        return next((t for t in self.all if t.name == name), None)

    def kinds_for(self, name: str) -> frozenset[str]:
        """Record kinds valid on an input topic."""
        spec = self.by_name(name)
        if spec is None:
            return frozenset()
        base = {"kernel": node_records.KERNEL_TOPIC, "state": node_records.STATE_TOPIC,
                "nvml": node_records.NVML_TOPIC, "evidence": node_records.EVIDENCE_TOPIC,
                "kube": node_records.KUBE_TOPIC}.get(spec.role)
        return wire.kinds_on(base) if base is not None else frozenset()


def topology(prefix: str = "", partitions: int = 8) -> Topology:
    """The topics, with names prefixed (tests, staging) and one partition count for all."""

    def spec(role: str, base: str, key: str, value: str) -> TopicSpec:
        name = f"{prefix}{base}"
        return TopicSpec(role, name, partitions, key, value, node_records.dead_letter_topic(name))

    nr = "models.node_records"
    return Topology(
        kernel=spec("kernel", node_records.KERNEL_TOPIC, "node", f"{nr}.KernelLine | KernelGap"),
        state=spec("state", node_records.STATE_TOPIC, "node/kind (hashed by node)",
                   f"{nr}.GpuInventory | GpuProcesses | PodAssignments | PodWorkloads | SpoolDrops"),
        nvml=spec("nvml", node_records.NVML_TOPIC, "node", "models.signals.nvml.records.NvmlEvent | GpuMissing | "
                  "models.signals.health.records.GpuHealth | models.signals.node_health.records.NodeGpuHealth"),
        evidence=spec("evidence", node_records.EVIDENCE_TOPIC, "node", f"{nr}.Evidence"),
        kube=spec("kube", node_records.KUBE_TOPIC, "node", "models.signals.kube_gpus.records.KubeGpuView"),
        incidents=spec("incidents", INCIDENTS_TOPIC, "node (incident) or cluster (fleet incident)",
                       "JSON {type: incident, change, reason, incident} (a fleet incident: component fleet)"),
        actions=spec("actions", ACTIONS_TOPIC, "node",
                     "JSON {kind: cordon_candidate|ticket|notification, operation, incident_id, idempotency_key, ...}"),
        completed=spec("completed", COMPLETED_TOPIC, "node",
                       "JSON {schema_version, request, ...the cordon result}"),
    )
