"""The Kafka ACLs each xidpipe principal needs, each with the reason the service needs it.

One list for the local test broker (`xidpipe.localinfra.kafka_security`) and for a production
cluster (`xidpipe kafka acls plan|apply`): ALLOW ACLs only, on the brokers' StandardAuthorizer with
`allow.everyone.if.no.acl.found=false`, so a principal may do what is listed here and nothing else.

Rights the services use, and where they are:

- the worker reconciles its topics' configs at start (`streams.topics.ensure_topics`, docs/kafka.md:
  the state topic turned compacted on upgrade): DESCRIBE_CONFIGS and ALTER_CONFIGS on its topics;
- the agent reads back the node's partition after a crash, to find which spooled records already
  reached Kafka (docs/agent.md): READ on the node topics, granted only with `agent_read_back`. Without
  it the read-back is refused, logged, and those records are sent again, which the worker drops as
  duplicates (kernel lines by node, boot id and sequence; events by content hash): it is not needed for
  correctness, and READ would let every node's agent read every node's records (other nodes' pods,
  processes and evidence);
- the responder never creates or configures topics: it leaves that to the worker and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.topics import topology


@dataclass(frozen=True, slots=True)
class Grant:
    """One ALLOW ACL: `principal` (a SCRAM user name) may do `operation` on the resource, for `reason`."""

    principal: str
    operation: str  # READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, ...
    resource: str  # TOPIC, GROUP, CLUSTER
    name: str
    pattern: str = "LITERAL"  # or PREFIXED
    reason: str = ""

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """What the broker stores of it (the reason is ours)."""
        return self.principal, self.operation, self.resource, self.name, self.pattern


def pipeline_grants(
    *,
    topic_prefix: str = "",
    agent: str = "agent",
    worker: str = "worker",
    worker_group: str = "xidpipe-worker",
    responder: str = "responder",
    responder_group: str = "xidpipe-responder",
    agent_read_back: bool = False,
) -> list[Grant]:
    """The least each xidpipe client needs (see the module's note for the rights some services use).

    agent: write the four node topics (nothing else: not read them, unless `agent_read_back`, not the
    actions topic, not the kube topic). worker: read the node topics, write their dead-letter twins, the incidents and
    actions topics (and theirs), create, describe and configure the pipeline's topics, use its consumer
    group and Faust's own `<app id>-` topics. responder: read the actions topic in its group, write the
    completed topic and the actions dead letters, and write the kube topic (the cluster's view of each
    node: only it may speak for the cluster).
    """
    topo = topology(topic_prefix, 1)
    ours = f"{topic_prefix}xidpipe."
    grants = [Grant(agent, "WRITE", "TOPIC", t.name, reason="publish the node's records") for t in topo.agent_inputs]
    if agent_read_back:
        grants += [Grant(agent, "READ", "TOPIC", t.name, reason="read back its node's partition after a crash "
                         "(docs/agent.md); lets every agent read every node's records") for t in topo.agent_inputs]
    grants += [Grant(worker, "READ", "TOPIC", t.name, reason="consume the node records") for t in topo.inputs]
    grants += [Grant(worker, "WRITE", "TOPIC", t.dead_letter, reason="dead-letter a record it cannot take")
               for t in topo.inputs]
    grants += [Grant(worker, "WRITE", "TOPIC", n, reason="publish incident changes and action requests")
               for t in topo.outputs for n in t.names]
    grants += [Grant(worker, "CREATE", "TOPIC", ours, "PREFIXED", "create the pipeline's topics at start"),
               Grant(worker, "DESCRIBE", "TOPIC", ours, "PREFIXED", "list the pipeline's topics and partitions"),
               Grant(worker, "DESCRIBE_CONFIGS", "TOPIC", ours, "PREFIXED",
                     "read the topics' configs to reconcile them at start (docs/kafka.md)"),
               Grant(worker, "ALTER_CONFIGS", "TOPIC", ours, "PREFIXED",
                     "set a config that differs from the declared one (docs/kafka.md: the state topic "
                     "turned compacted on upgrade)")]
    grants += [Grant(worker, op, "TOPIC", f"{worker_group}-", "PREFIXED", "Faust's own topics (its app id's)")
               for op in ("READ", "WRITE", "CREATE", "DESCRIBE")]
    grants += [Grant(worker, "READ", "GROUP", worker_group, reason="the workers' consumer group")]
    grants += [Grant(responder, "READ", "TOPIC", topo.actions.name, reason="consume the action requests"),
               Grant(responder, "WRITE", "TOPIC", topo.actions.dead_letter, reason="dead-letter a request"),
               Grant(responder, "WRITE", "TOPIC", topo.completed.name, reason="report what it did"),
               Grant(responder, "WRITE", "TOPIC", topo.kube.name,
                     reason="publish the cluster's view of each node (allocatable GPUs, the device plugin)"),
               Grant(responder, "READ", "GROUP", responder_group, reason="the responders' consumer group")]
    return grants


@dataclass(frozen=True, slots=True)
class AclPlan:
    """What applying `wanted` to a cluster holding `present` (the ACL keys of the same principals) does."""

    wanted: tuple[Grant, ...]
    present: frozenset[tuple[str, str, str, str, str]]

    @property
    def missing(self) -> list[Grant]:
        return [g for g in self.wanted if g.key not in self.present]

    @property
    def extra(self) -> list[tuple[str, str, str, str, str]]:
        """ACLs the principals hold that the plan does not list (never removed: shown for a person)."""
        keys = {g.key for g in self.wanted}
        return sorted(k for k in self.present if k not in keys)
