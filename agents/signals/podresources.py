"""The PodResources sensor: which pod holds which GPU, from the kubelet (`agents.podresources.watcher`)."""

from __future__ import annotations

from agents.signals.base import Sensor, SensorContext, SensorSpec


def build(ctx: SensorContext) -> Sensor | None:
    settings = ctx.settings
    if not settings.podresources_enabled:
        return None
    from agents.podresources.watcher import PodResourcesWatcher

    return PodResourcesWatcher(
        node=settings.node,
        socket_path=settings.podresources_socket,
        publish=ctx.publish,
        metrics=ctx.metrics,
        interval_s=settings.podresources_interval_s,
        timeout_s=settings.podresources_timeout_s,
        resource_prefixes=settings.gpu_resource_prefixes,
    )


SENSOR = SensorSpec("podresources", build)
