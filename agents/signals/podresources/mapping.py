"""Map kubelet device ids to containers (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from models.node_records import DeviceAssignment


def split_device_id(device_id: str) -> tuple[str, int | None]:
    """`GPU-x::3` (time-slicing replica) → (`GPU-x`, 3); anything else → (id, None)."""
    base, sep, replica = device_id.partition("::")
    if sep and replica.isdigit():
        return base, int(replica)
    return device_id, None


def is_gpu_resource(resource_name: str, prefixes: Sequence[str]) -> bool:
    return any(resource_name == p or (p.endswith("-") and resource_name.startswith(p)) for p in prefixes)


def assignments(pod_resources: Iterable[Any], prefixes: Sequence[str]) -> list[DeviceAssignment]:
    """Flatten a ListPodResourcesResponse's pod_resources into one entry per (device id, container)."""
    out: list[DeviceAssignment] = []
    for pod in pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name, prefixes):
                    continue
                for device_id in devices.device_ids:
                    gpu_id, replica = split_device_id(device_id)
                    out.append(DeviceAssignment(
                        device_id=device_id,
                        gpu_id=gpu_id,
                        mig=gpu_id.startswith("MIG-"),
                        replica=replica,
                        resource_name=devices.resource_name,
                        pod=pod.name,
                        namespace=pod.namespace,
                        container=container.name,
                    ))
    out.sort(key=lambda a: (a.device_id, a.namespace, a.pod, a.container))
    return out


def allocatable(devices: Iterable[Any], prefixes: Sequence[str]) -> list[str]:
    return sorted(
        device_id
        for d in devices
        if is_gpu_resource(d.resource_name, prefixes)
        for device_id in d.device_ids
    )
