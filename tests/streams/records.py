"""Node records for the stream tests: one small cluster with known GPUs, pods and processes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

from models.node_records import (
    DeviceAssignment,
    GpuInfo,
    GpuInventory,
    GpuProcess,
    GpuProcesses,
    KernelLine,
    MigDevice,
    NodeRecord,
    PodAssignments,
    PodWorkload,
    PodWorkloads,
)
from models.signals.nvml.records import NvmlEvent
from models.workloads import WorkloadRef
from streams.items import Item, ItemMapper

T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


def uuid(node: str, i: int) -> str:
    n = sum(node.encode()) % 10_000
    return f"GPU-{n:08d}-0000-4000-8000-{i:012d}"


def pci(i: int) -> str:
    return f"0000:{0x18 + 0x20 * i:02x}:00.0"


def serial(node: str, i: int) -> str:
    return f"16549230{sum(node.encode()) % 1000:03d}{i:02d}"


def inventory(node: str, at: datetime, gpus: int = 4, mig_on: int | None = None) -> GpuInventory:
    infos = []
    for i in range(gpus):
        migs: tuple[MigDevice, ...] = ()
        if mig_on == i:
            migs = tuple(MigDevice(uuid=f"MIG-{uuid(node, i)[4:]}-{g}", index=g, gpu_instance_id=g + 1,
                                   compute_instance_id=0) for g in range(2))
        infos.append(GpuInfo(index=i, uuid=uuid(node, i), pci_bus_id=f"0000{pci(i).upper()}",
                             serial=serial(node, i), name="NVIDIA H100 80GB HBM3", mig_devices=migs))
    return GpuInventory(node=node, record_id=f"inventory:{node}:{at.isoformat()}", emitted_at=at, gpus=tuple(infos))


def pods(node: str, at: datetime, held: dict[int, tuple[str, str, str]], mig: dict[str, tuple[str, str, str]]
         | None = None) -> PodAssignments:
    """`held`: GPU index → (namespace, pod, container)."""
    assignments = [
        DeviceAssignment(device_id=uuid(node, i), gpu_id=uuid(node, i), resource_name="nvidia.com/gpu",
                         namespace=ns, pod=pod, container=c)
        for i, (ns, pod, c) in sorted(held.items())
    ]
    for mig_uuid, (ns, pod, c) in sorted((mig or {}).items()):
        assignments.append(DeviceAssignment(device_id=mig_uuid, gpu_id=mig_uuid, mig=True,
                                            resource_name="nvidia.com/mig-3g.40gb", namespace=ns, pod=pod,
                                            container=c))
    return PodAssignments(node=node, record_id=f"pods:{node}:{at.isoformat()}", emitted_at=at, changed_at=at,
                          assignments=tuple(assignments))


def workloads(node: str, at: datetime, owned: dict[tuple[str, str], tuple[str, str, str]]) -> PodWorkloads:
    """`owned`: (namespace, pod) → (kind, API group, name) of its workload, as the agent's workloads
    sensor reads them from the API server."""
    return PodWorkloads(node=node, record_id=f"workloads:{node}:{at.isoformat()}", emitted_at=at, changed_at=at,
                        pods=tuple(PodWorkload(namespace=ns, pod=pod, uid=f"uid-{ns}-{pod}", workload=WorkloadRef(
                            kind=kind, group=group, namespace=ns, name=name, how="label", basis="test"))
                            for (ns, pod), (kind, group, name) in sorted(owned.items())))


def processes(node: str, at: datetime, procs: dict[int, int]) -> GpuProcesses:
    """`procs`: pid → GPU index."""
    return GpuProcesses(node=node, record_id=f"procs:{node}:{at.isoformat()}", emitted_at=at,
                        processes=tuple(GpuProcess(gpu_uuid=uuid(node, g), pid=pid, container_id=f"cri-{pid}")
                                        for pid, g in sorted(procs.items())))


class Kmsg:
    """Kernel lines as the agent publishes them from /dev/kmsg: bare messages, boot id and seq."""

    def __init__(self, node: str, boot_id: str = "b0", seq: int = 1000) -> None:
        self.node, self.boot_id, self.seq = node, boot_id, seq

    def line(self, message: str, at: datetime, fault: bool = True) -> KernelLine:
        self.seq += 1
        return KernelLine(node=self.node, record_id=f"kmsg:{self.boot_id}:{self.seq}", source="kmsg",
                          message=message, fault=fault, boot_id=self.boot_id, seq=self.seq, observed_at=at,
                          emitted_at=at)

    def xid(self, gpu: int, xid: int, at: datetime, pid: int | None = None, name: str | None = None,
            text: str = "Graphics Exception: ESR 0x4041b0=0x3f20002") -> KernelLine:
        who = f"pid={pid}, name={name}" if pid is not None else "pid='<unknown>', name=<unknown>"
        return self.line(f"NVRM: Xid (PCI:{pci(gpu)[:-2]}): {xid}, {who}, {text}", at)

    def identity(self, gpu: int, at: datetime) -> Iterator[KernelLine]:
        yield self.line(f"NVRM: GPU at PCI:{pci(gpu)[:-2]}: {uuid(self.node, gpu)}", at, fault=False)
        yield self.line(f"NVRM: GPU Board Serial Number: {serial(self.node, gpu)}", at, fault=False)


def nvml_xid(node: str, gpu: int, xid: int, at: datetime, n: int) -> NvmlEvent:
    return NvmlEvent(node=node, record_id=f"nvml:{node}:{n}", gpu_uuid=uuid(node, gpu),
                     pci_bus_id=f"0000{pci(gpu).upper()}", event_type="xid_critical", event_type_mask=8,
                     event_data=xid, xid=xid, observed_at=at, emitted_at=at)


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def items_of(records: Iterable[NodeRecord]) -> list[Item]:
    """The store items the item mapper makes of `records` (open records flushed at the end)."""
    mapper = ItemMapper()
    out: list[Item] = []
    for r in records:
        out.extend(mapper.items(r, "topic"))
    out.extend(mapper.flush_all())
    return out
