"""The GPU driver's ResourceSlices as a list+watch keeps them: which DRA device each GPU UUID is.

Only the slices of one driver (`spec.driver`, a field selector: NVIDIA's `gpu.nvidia.com`) are
watched. Per slice it keeps the node, the pool and its generation, and each device's name with its
UUID (the attribute `uuid`, or `<driver>/uuid`); a pool's devices are those of its slices of the
newest generation (a driver that republishes a pool bumps its generation; older slices are on their
way out). From them:

- `device_of(uuid)`: the (driver, pool, device) of a GPU, or None;
- `node_gpus(node)`: how many GPU devices a node's slices list (0: none, e.g. the classic device plugin);
- `gpus_by_node()`: the same for every node, for the breaker's pool counts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from models.quarantine import DeviceRef
from respond.watch_cache import WatchCache


@dataclass(frozen=True, slots=True)
class SliceEntry:
    node: str
    pool: str
    generation: int
    devices: tuple[tuple[str, str], ...]  # (device name, GPU UUID or "")


def slice_entry(raw: dict[str, Any], driver: str, uuid_attribute: str) -> SliceEntry | None:
    spec = raw.get("spec") or {}
    if spec.get("driver") != driver:
        return None
    pool = spec.get("pool") or {}
    devices = []
    for device in spec.get("devices") or []:
        attributes = device.get("attributes") or {}
        value = attributes.get(uuid_attribute) or attributes.get(f"{driver}/{uuid_attribute}") or {}
        devices.append((str(device.get("name", "")), str(value.get("string", ""))))
    return SliceEntry(str(spec.get("nodeName") or ""), str(pool.get("name") or ""), int(pool.get("generation") or 0),
                      tuple(devices))


class SliceCache(WatchCache[SliceEntry]):
    """`resource`: the client's `ResourceV1Api`."""

    def __init__(self, resource: Any, driver: str, uuid_attribute: str = "uuid",
                 **kwargs: Any) -> None:
        def lister(**kw: Any) -> Any:
            return resource.list_resource_slice(field_selector=f"spec.driver={driver}", **kw)

        super().__init__(f"resourceslices[{driver}]", lister, lambda raw: slice_entry(raw, driver, uuid_attribute),
                         **kwargs)
        self.driver = driver
        self._pools: dict[str, dict[str, SliceEntry]] = defaultdict(dict)  # pool -> slice name -> entry
        self._by_uuid: dict[str, tuple[str, DeviceRef]] | None = None  # rebuilt after a change

    def _changed(self, name: str, old: SliceEntry | None, new: SliceEntry | None) -> None:
        if old is not None:
            self._pools[old.pool].pop(name, None)
            if not self._pools[old.pool]:
                del self._pools[old.pool]
        if new is not None:
            self._pools[new.pool][name] = new
        self._by_uuid = None

    def _current(self) -> list[SliceEntry]:
        """The slices of each pool's newest generation (under the lock)."""
        out: list[SliceEntry] = []
        for entries in self._pools.values():
            newest = max(e.generation for e in entries.values())
            out.extend(e for e in entries.values() if e.generation == newest)
        return out

    def device_of(self, uuid: str) -> tuple[str, DeviceRef] | None:
        """(its node, the device) of the GPU with this UUID, or None."""
        with self.lock:
            if self._by_uuid is None:
                self._by_uuid = {found.lower(): (e.node, DeviceRef(driver=self.driver, pool=e.pool, device=device))
                                 for e in self._current() for device, found in e.devices if found}
            return self._by_uuid.get(uuid.lower())

    def gpus_by_node(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        with self.lock:
            for entry in self._current():
                counts[entry.node] += len(entry.devices)
        return dict(counts)

    def node_gpus(self, node: str) -> int:
        return self.gpus_by_node().get(node, 0)
