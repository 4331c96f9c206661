"""GPUs that vanish, seen from the node: NVML's count against the PCI bus and the expected count.

- fewer NVIDIA GPUs on the PCI bus than expected (the `expected_gpus` setting, else the most the
  agent has seen): GPUs left the bus;
- fewer GPUs in NVML than on the bus: the driver lost some (the missing addresses are named).

A fault of one GPU when exactly one is missing and its address is known (it joins that GPU's Xid 79
incident), else of the node. Without NVML (the driver not loaded) the count is the driver-load
check's to report.
"""

from __future__ import annotations

from models.signals.finding import Finding
from models.signals.node_health.records import NodeGpuHealth
from models.stream_policy import HealthPolicy
from models.vocabulary import Category, Family


def missing(rec: NodeGpuHealth) -> tuple[str, ...]:
    """The PCI addresses on the bus that NVML does not list."""
    listed = set(rec.nvml_gpus)
    return tuple(a for a in rec.pci_gpus if a not in listed)


def check(rec: NodeGpuHealth, policy: HealthPolicy) -> tuple[Finding, ...]:
    if rec.nvml != "ok" or rec.nvml_count is None:
        return ()
    onset = rec.since.get("gpu_count", rec.observed_at)
    expected = rec.expected_count
    bus = len(rec.pci_gpus)
    gone = missing(rec)
    where = f" (expected from the {rec.expected_from})" if rec.expected_from else ""
    if expected is not None and bus < expected and rec.pci_gpus:
        message = (f"{bus} of {expected} GPUs on the PCI bus{where}, {rec.nvml_count} in NVML: "
                   f"{expected - bus} left the bus")
    elif expected is not None and not rec.pci_gpus and rec.nvml_count < expected:
        message = f"{rec.nvml_count} of {expected} GPUs in NVML{where}"
    elif gone:
        message = (f"{rec.nvml_count} GPUs in NVML, {bus} on the PCI bus: the driver lost {', '.join(gone)}")
    else:
        return ()
    return (Finding("gpu_count", Family.GPU_LOST, Category.HARDWARE, message, onset, None, None,
                    "GPUs missing from the node", details={"nvml": rec.nvml_count, "pci": bus, "expected": expected,
                                                           "missing": list(gone)}),)
