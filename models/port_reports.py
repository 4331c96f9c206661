"""Root-port AER reports tied to the GPU below the port.

An AER report of a PCIe root port (or a switch port) names the port, not the device behind it
(`details.subject` "port", `FaultRecord.device` None): the line cannot say which GPU lost its link.
The node's inventory can: the agent reports each GPU's upstream bridges (`GpuInfo.upstream_bridges`,
the sysfs path from the root port down). With the inventory valid at the report's time:

- one GPU below the port: the report is that GPU's (its PCI address), and joins its incident (an AER
  report with the Xid 79 and the bus-loss lines is one lost GPU);
- several GPUs below it (behind a PCIe switch): a node-level PCIe incident, the report naming them
  (`details.gpus_below`);
- no inventory that knows the port (an older agent, a node without NVML): a node-level PCIe incident,
  as before.

`xidpipe scan`, the stream and `xidpipe replay` all call `tie_port_report` before attribution.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from models.correlate import NodeHistory, valid_at
from models.incidents import FaultObservation
from models.node_records import GpuInfo
from models.pci import normalize_pci


def port_of(obs: FaultObservation) -> str | None:
    """The port a root-port AER report names (None for any other report)."""
    if obs.kind != "pcie_aer" or obs.details.get("subject") != "port" or obs.pci is not None:
        return None
    port = obs.details.get("port")
    return normalize_pci(port) if isinstance(port, str) else None


def gpus_below(port: str, gpus: tuple[GpuInfo, ...]) -> list[GpuInfo]:
    """The GPUs whose upstream bridges hold `port`."""
    return [g for g in gpus if port in {normalize_pci(b) for b in g.upstream_bridges}]


def tie_port_report(obs: FaultObservation, history: NodeHistory, at: datetime, skew_s: float = 0.0) -> FaultObservation:
    """The report with the GPU below its port when the inventory valid at `at` names one, else naming the
    GPUs below it; any other report, or one the inventory cannot tie, as it is."""
    port = port_of(obs)
    if port is None:
        return obs
    snap = valid_at(history.inventories, at, skew_s) or (history.inventories[0] if history.inventories else None)
    below = gpus_below(port, snap.gpus) if snap is not None else []
    if len(below) == 1:
        gpu = below[0]
        return replace(obs, pci=normalize_pci(gpu.pci_bus_id), gpu_uuid=obs.gpu_uuid or gpu.uuid,
                       details={**obs.details, "tied_to": f"the GPU below port {port} ({gpu.uuid})"})
    if below:
        return replace(obs, details={**obs.details, "gpus_below": [g.uuid for g in below]})
    return obs
