"""The PodResources sensor: which pod holds which GPU, from the kubelet's PodResources API (gRPC v1 on a
unix socket; `watcher`, the stubs `api_pb2*` generated from `api.proto`, the mapping `mapping`). Its
records are node state (`models.node_records.PodAssignments`), not a health signal; it uses no
capability."""

from __future__ import annotations

from agents.settings import AgentSettings
from agents.signals.base import SensorSpec
from agents.signals.podresources.watcher import PodResourcesSettings, PodResourcesWatcher


def settings(agent: AgentSettings) -> PodResourcesSettings | None:
    if not agent.podresources_enabled:
        return None
    return PodResourcesSettings(
        socket_path=agent.podresources_socket,
        interval_s=agent.podresources_interval_s,
        timeout_s=agent.podresources_timeout_s,
        resource_prefixes=tuple(agent.gpu_resource_prefixes),
    )


SENSOR = SensorSpec("podresources", settings, PodResourcesWatcher)
