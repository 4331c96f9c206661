"""A node's GPUs as the Kubernetes API shows them, from the raw JSON of the node and of the device
plugin's pod on it: the fields of a `models.signals.kube_gpus.KubeGpuView`. Pure."""

from __future__ import annotations

from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"


def _count(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _ready(conditions: list[dict[str, Any]] | None) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions or ())


def is_gpu_node(node: dict[str, Any], count_label: str) -> bool:
    """A node that has (or should have) GPUs: it lists the resource, or its labels count GPUs."""
    status, labels = node.get("status") or {}, (node.get("metadata") or {}).get("labels") or {}
    return GPU_RESOURCE in (status.get("capacity") or {}) or count_label in labels


def node_fields(node: dict[str, Any], count_label: str) -> dict[str, Any]:
    status, labels = node.get("status") or {}, (node.get("metadata") or {}).get("labels") or {}
    return {
        "node_ready": _ready(status.get("conditions")),
        "resource": GPU_RESOURCE,
        "capacity": _count((status.get("capacity") or {}).get(GPU_RESOURCE)),
        "allocatable": _count((status.get("allocatable") or {}).get(GPU_RESOURCE)),
        "expected": _count(labels.get(count_label)),
    }


def pod_fields(pod: dict[str, Any] | None) -> dict[str, Any]:
    """The device plugin's pod on the node (None: there is none)."""
    if pod is None:
        return {"plugin_pod": None, "plugin_ready": None, "plugin_restarts": None, "plugin_waiting": None}
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    waiting = next((w.get("reason") for c in containers if (w := (c.get("state") or {}).get("waiting"))), None)
    return {
        "plugin_pod": f"{meta.get('namespace')}/{meta.get('name')}",
        "plugin_ready": _ready(status.get("conditions")),
        "plugin_restarts": sum(int(c.get("restartCount") or 0) for c in containers),
        "plugin_waiting": waiting,
    }
