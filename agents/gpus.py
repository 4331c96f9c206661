"""The node's GPUs as a sensor last reported them (the `gpus` capability of `agents.signals`), for the
kernel path: the pre-filter keeps the AER lines of their PCI addresses and their root ports', and the
evidence collector names the GPU at a kernel fault line's address. Empty until a sensor reports."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from models.node_records import GpuInfo
from models.pci import normalize_pci


class NodeGpus:
    def __init__(self, on_addresses: Callable[[Sequence[str]], None]) -> None:
        self._on_addresses = on_addresses
        self._gpus: tuple[GpuInfo, ...] = ()

    def report(self, gpus: Sequence[GpuInfo], addresses: Sequence[str]) -> None:
        """The GPUs a sensor read, and the addresses (GPUs and root ports) whose AER lines concern them.
        Called from the sensor's thread; readers see the old or the new tuple, never a mix."""
        self._gpus = tuple(gpus)
        self._on_addresses(addresses)

    def gpu_for_bus(self, bus_id: str) -> GpuInfo | None:
        """The GPU at a PCI address (any spelling), from the last report."""
        want = normalize_pci(bus_id)
        if want is None:
            return None
        for gpu in self._gpus:
            if normalize_pci(gpu.pci_bus_id) == want:
                return gpu
        return None
