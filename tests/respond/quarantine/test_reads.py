"""How the quarantine's caches read the API's objects: a ResourceSlice's GPU devices (NVIDIA's shape,
the pool's newest generation), and a DeviceTaintRule as xidpipe's own, changed, or someone else's."""

from __future__ import annotations

from typing import Any

from models.quarantine import DeviceRef
from respond.quarantine.rule_cache import rule_view
from respond.quarantine.slice_cache import SliceCache, slice_entry
from tests.cluster import gpu_device


def raw_slice(name: str, node: str, generation: int, uuids: list[str],
              driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "7"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": generation},
                     "devices": [gpu_device(i, u) for i, u in enumerate(uuids)]}}


def test_a_slice_lists_its_gpus_by_uuid() -> None:
    entry = slice_entry(raw_slice("s", "n1", 1, ["GPU-a", "GPU-b"]), "gpu.nvidia.com", "uuid")
    assert entry is not None and entry.devices == (("gpu-0", "GPU-a"), ("gpu-1", "GPU-b"))
    assert slice_entry(raw_slice("s", "n1", 1, ["GPU-a"], driver="other.example.com"), "gpu.nvidia.com", "uuid") \
        is None


def test_only_a_pools_newest_generation_counts() -> None:
    cache = SliceCache(resource=None, driver="gpu.nvidia.com")
    for name, generation, uuids in (("old", 1, ["GPU-a", "GPU-b"]), ("new", 2, ["GPU-c"])):
        raw = raw_slice(name, "n1", generation, uuids)
        cache.observe(name, 7, slice_entry(raw, "gpu.nvidia.com", "uuid"))
    assert cache.device_of("gpu-c") == ("n1", DeviceRef(driver="gpu.nvidia.com", pool="n1", device="gpu-0"))
    assert cache.device_of("GPU-a") is None and cache.node_gpus("n1") == 1
    cache.observe("new", 8, None)
    assert cache.device_of("GPU-a") is not None and cache.node_gpus("n1") == 2


def raw_rule(labels: dict[str, str], effect: str = "NoSchedule", written: str = "NoSchedule") -> dict[str, Any]:
    return {"metadata": {"name": "xidpipe-gpu-a", "resourceVersion": "9", "labels": labels,
                         "annotations": {"xidpipe.io/effect": written, "xidpipe.io/device": "gpu.nvidia.com/n1/gpu-0",
                                         "xidpipe.io/incident": "v2:x@t", "xidpipe.io/gpu-uuid": "GPU-a"}},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
                     "taint": {"key": "xidpipe.io/gpu-fault", "value": "memory", "effect": effect}},
            "status": {"conditions": [{"type": "EvictionInProgress", "status": "False", "reason": "Completed",
                                       "message": "1 pod would be evicted"}]}}


def test_a_rule_reads_as_xidpipe_wrote_it_or_as_changed() -> None:
    ours = rule_view(raw_rule({"app.kubernetes.io/managed-by": "xidpipe"}))
    assert ours is not None and ours.changed is None and ours.effective
    assert (ours.node, ours.incident_id, ours.gpu_uuid) == ("n1", "v2:x@t", "GPU-a")
    assert ours.eviction == "False: Completed 1 pod would be evicted"
    changed = rule_view(raw_rule({"app.kubernetes.io/managed-by": "xidpipe"}, effect="NoExecute"))
    assert changed is not None and changed.changed == "its effect is NoExecute, xidpipe wrote NoSchedule"
    assert rule_view(raw_rule({})) is None  # not xidpipe's
