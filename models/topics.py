"""Every topic of the stream pipeline, declared in one place.

Each topic has a partition count, a key and a value schema, and a dead-letter twin
(`<name>.dlq`). The four input topics carry the node agent's records (`models.node_records`),
keyed by node name; they share one partition count, so one partition holds everything one node
published (co-partitioning: no repartition topics). The outputs are keyed by node, except the
fleet incidents (incidents of component `fleet`), which are keyed by cluster. The responder reports
what it did with each action request on `<actions>.completed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from models import node_records

INCIDENTS_TOPIC = "xidpipe.incidents"
ACTIONS_TOPIC = "xidpipe.actions"
COMPLETED_TOPIC = f"{ACTIONS_TOPIC}.completed"  # what the responder did with each action request


@dataclass(frozen=True, slots=True)
class TopicSpec:
    role: str  # kernel, state, nvml, evidence, incidents, actions, completed
    name: str
    partitions: int
    key: str  # what the key is: "node" or "node or cluster"
    value: str  # the schema of the value
    dead_letter: str

    @property
    def names(self) -> tuple[str, str]:
        return self.name, self.dead_letter


@dataclass(frozen=True, slots=True)
class Topology:
    kernel: TopicSpec
    state: TopicSpec
    nvml: TopicSpec
    evidence: TopicSpec
    incidents: TopicSpec
    actions: TopicSpec
    completed: TopicSpec

    @property
    def inputs(self) -> tuple[TopicSpec, ...]:
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
                "nvml": node_records.NVML_TOPIC, "evidence": node_records.EVIDENCE_TOPIC}.get(spec.role)
        return frozenset(k for k, t in node_records.TOPIC_FOR_KIND.items() if t == base)


def topology(prefix: str = "", partitions: int = 8) -> Topology:
    """The topics, with names prefixed (tests, staging) and one partition count for all."""

    def spec(role: str, base: str, key: str, value: str) -> TopicSpec:
        name = f"{prefix}{base}"
        return TopicSpec(role, name, partitions, key, value, node_records.dead_letter_topic(name))

    nr = "models.node_records"
    return Topology(
        kernel=spec("kernel", node_records.KERNEL_TOPIC, "node", f"{nr}.KernelLine | KernelGap"),
        state=spec("state", node_records.STATE_TOPIC, "node",
                   f"{nr}.GpuInventory | GpuProcesses | PodAssignments | SpoolDrops"),
        nvml=spec("nvml", node_records.NVML_TOPIC, "node", f"{nr}.NvmlEvent | GpuMissing"),
        evidence=spec("evidence", node_records.EVIDENCE_TOPIC, "node", f"{nr}.Evidence"),
        incidents=spec("incidents", INCIDENTS_TOPIC, "node (incident) or cluster (fleet incident)",
                       "JSON {type: incident, change, reason, incident} (a fleet incident: component fleet)"),
        actions=spec("actions", ACTIONS_TOPIC, "node",
                     "JSON {kind: cordon_candidate|ticket|notification, operation, incident_id, idempotency_key, ...}"),
        completed=spec("completed", COMPLETED_TOPIC, "node",
                       "JSON {schema_version, request, ...the cordon result}"),
    )
