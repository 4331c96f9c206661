"""The workloads sensor: the workload each GPU pod of the node belongs to, from the API server
(`sensor`: a list and watch of the node's pods, the owners their labels do not name read once each;
`kube`: the Kubernetes adapter, the agent's only module that imports `kubernetes`). Its records are
node state (`models.node_records.PodWorkloads`), not a health signal; it uses no capability. Off
unless `workloads_enabled` (it needs an API token: the chart mounts one and grants what it reads)."""

from __future__ import annotations

from agents.settings import AgentSettings
from agents.signals.base import SensorSpec
from agents.signals.workloads.sensor import WorkloadsSensor, WorkloadsSettings


def settings(agent: AgentSettings) -> WorkloadsSettings | None:
    if not agent.workloads_enabled:
        return None
    return WorkloadsSettings(
        kube_config=agent.workloads_kube_config,
        heartbeat_s=agent.workloads_heartbeat_s,
        watch_timeout_s=agent.workloads_watch_timeout_s,
        retry_s=agent.workloads_retry_s,
        resource_prefixes=tuple(agent.gpu_resource_prefixes),
    )


SENSOR = SensorSpec("workloads", settings, WorkloadsSensor)
