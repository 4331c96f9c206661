"""A simulated GPU fleet that speaks the node agent's Kafka protocol, for benchmarks/fleet_bench.py.

One process stands in for N nodes × 8 GPUs. Every record is built from the agent's own pieces: the
record schemas and their encoding and topics (`models.node_records`), the agent's producer settings
(`agents.publisher.producer_config`: acks=all, idempotent, the node partitioner) and record keys
(`models.topics.record_key`: the node, or node/kind on the state topic), the pre-filter that marks
a kernel line as a fault (`agents.kernlog.prefilter`), the kmsg record id and clock (`kmsg:<boot>:<seq>`,
event time = boot time + monotonic stamp), and the PodResources mapping (`agents.signals.podresources.mapping`)
applied to kubelet protobuf messages. Records carry no node identity token: the worker under
benchmark runs with `verify_node_identity` off (its default), so no TokenReview is in the path.

What each node publishes (rates per node; `FleetRates`):
- at start, and every `inventory_interval_s` (the agent's default, 300 s): its GPU inventory;
- at start and at each job change (one every `job_change_s` on average): pod assignments (PodResources),
  GPU processes (NVML) and the pods' owners (the workloads sensor: an owner change), the owners again
  at the sensor's heartbeat (`workloads_heartbeat_s`, 600 s: the same record);
- at start and at the health poller's heartbeat (`health_heartbeat_s`, 600 s: a flat GPU is published
  no more often): each GPU's health (`gpu_health`, with its hour of minutes and day of hours) and the
  node's (`node_gpu_health`);
- background GPU kernel lines the pre-filter keeps that report no fault (persistence mode, MSI, UVM);
- faults: kernel Xid lines, application (13, 31, 43, 45) and hardware (48, 63, 64, 79, 94, 95), on a
  random GPU of a random node;
- a burst: one large job's teardown, Xid 43 on every GPU of a share of the fleet within a second.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agents.kernlog.prefilter import DEFAULT_FAULT_PATTERNS, DEFAULT_KEEP_PATTERNS, PreFilter
from agents.publisher import producer_config
from agents.signals.podresources import api_pb2
from agents.signals.podresources.mapping import allocatable, assignments
from models.node_records import (
    GpuInfo,
    GpuInventory,
    GpuProcess,
    GpuProcesses,
    KernelLine,
    NodeRecord,
    PodAssignments,
    PodWorkload,
    PodWorkloads,
    encode_node_record,
)
from models.signals.health.records import GpuHealth, HealthHistory, HealthReading, LinkReading
from models.signals.node_health.records import NodeGpuHealth
from models.topics import record_key
from models.wire import topic_for
from models.workloads import WorkloadRef

GPUS_PER_NODE = 8
BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")  # an HGX H100 board's GPU buses
GPU_RESOURCE = "nvidia.com/gpu"
BURST_PROCESS = "pt_burst"  # the burst's lines name this process: the history tells them apart
APP_PROCESS = "python3"

# Xid → share of the fault lines and the message the driver prints after "pid=..., name=..., ".
# Application errors dominate what fleets see (job teardowns, illegal addresses); the hardware share
# stands for ECC (48, 63, 64, 94, 95) and lost GPUs (79).
XID_MIX: dict[int, tuple[float, str]] = {
    13: (0.25, "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address"),
    31: (0.20, "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x73ac_1c000000. "
               "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE"),
    43: (0.20, "Ch 00000008"),
    45: (0.05, "Ch 00000001"),
    48: (0.04, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
               "subpartition 0."),
    63: (0.08, "Row Remapper: New row (0x0000000000bf12a0) was marked for remapping, reset gpu to activate."),
    64: (0.03, "Row Remapper: Failed to remap row (0x0000000000bf12a0)."),
    79: (0.03, "GPU has fallen off the bus."),
    94: (0.08, "Contained: SM (0x1). RST: No, D-RST: No"),
    95: (0.04, "Uncontained: FBHUB. RST: Yes, D-RST: No"),
}
APPLICATION_XIDS = frozenset({13, 31, 43, 45})
BACKGROUND = (
    "NVRM: GPU 0000:{bus}:00.0: persistence mode enabled",
    "nvidia 0000:{bus}:00.0: irq 123 for MSI/MSI-X",
    "NVRM: GPU at 0000:{bus}:00.0 has software scheduler DISABLED with policy BEST_EFFORT.",
    "nvidia-uvm: Loaded the UVM driver, major device number 507.",
)


@dataclass(frozen=True)
class FleetRates:
    """Records per node per second, and the snapshot periods."""

    kernel_per_node_s: float = 0.5  # every kernel line: background + faults
    fault_share: float = 0.05  # share of the kernel lines that are Xid faults
    inventory_interval_s: float = 300.0  # the agent's inventory_interval_s
    job_change_s: float = 600.0  # mean time between job changes on a node (pods + processes + owners)
    health_heartbeat_s: float = 600.0  # the agent's health_heartbeat_s: a flat GPU's health, this often
    workloads_heartbeat_s: float = 600.0  # the agent's workloads_heartbeat_s: the owners again, this often


@dataclass
class SimNode:
    name: str
    index: int
    boot_id: str
    boot_time: datetime
    gpus: tuple[GpuInfo, ...]
    job: str = ""
    generation: int = 0
    seq: int = 0
    next_job_at: float = 0.0
    next_inventory_at: float = 0.0
    next_health_at: float = 0.0
    next_owners_at: float = 0.0
    owners: PodWorkloads | None = None
    health_first: bool = True


def _gpu(node: int, i: int, rng: random.Random) -> GpuInfo:
    return GpuInfo(index=i, uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                   pci_bus_id=f"00000000:{BUSES[i].upper()}:00.0", serial=f"16529230{node:05d}{i}",
                   name="NVIDIA H100 80GB HBM3", vbios_version="96.00.74.00.01")


@dataclass
class Fleet:
    """The fleet's state and the records it publishes; `due(now)` yields what is due by `now`."""

    nodes: int
    rates: FleetRates = field(default_factory=FleetRates)
    burst_share: float = 0.10
    seed: int = 7
    prefix: str = "sim"
    driver: str = "550.54.15"
    fleet: list[SimNode] = field(init=False)
    prefilter: PreFilter = field(init=False)
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        now = datetime.now(UTC)
        self.fleet = [
            SimNode(name=f"{self.prefix}-{n:05d}", index=n, boot_id=str(uuid.UUID(int=self.rng.getrandbits(128))),
                    boot_time=now - timedelta(hours=self.rng.uniform(1, 24 * 30)),
                    gpus=tuple(_gpu(n, i, self.rng) for i in range(GPUS_PER_NODE)))
            for n in range(self.nodes)
        ]
        self.prefilter = PreFilter(DEFAULT_KEEP_PATTERNS, DEFAULT_FAULT_PATTERNS)
        self.counts = {"inventory": 0, "pod_assignments": 0, "gpu_processes": 0, "pod_workloads": 0,
                       "pod_workloads_again": 0, "gpu_health": 0, "node_gpu_health": 0, "kernel_background": 0,
                       "fault": 0, "burst_fault": 0}
        self._carry = {"kernel": 0.0}
        self._xids = list(XID_MIX)
        self._weights = [XID_MIX[x][0] for x in self._xids]
        self._t = 0.0
        self._burst_count = max(1, round(self.nodes * self.burst_share)) if self.burst_share > 0 else 0
        self._serial = 0

    @property
    def burst_nodes(self) -> list[SimNode]:
        return self.fleet[: self._burst_count]

    # --- snapshots ------------------------------------------------------------------------------
    def schedule_start(self, t0: float, spread_s: float) -> None:
        """Every node's agent starts within `spread_s` of `t0`: inventory, pods and processes first."""
        for node in self.fleet:
            start = t0 + spread_s * node.index / max(1, self.nodes)
            node.next_inventory_at = start
            node.next_job_at = start
            node.next_health_at = start
        self._t = t0

    def _job_name(self, node: SimNode) -> str:
        if node.index < self._burst_count:
            return "llm/pretrain"  # the large job whose teardown is the burst
        return f"team-{node.index % 20}/train-{node.index // 16}-{node.generation}"

    def inventory(self, node: SimNode) -> GpuInventory:
        self.counts["inventory"] += 1
        return GpuInventory(node=node.name, record_id=f"inventory:{node.name}:{self._stamp()}",
                            driver_version=self.driver, boot_id=node.boot_id, boot_time=node.boot_time,
                            cuda_driver_version=12040, gpus=node.gpus)

    def job_change(self, node: SimNode) -> list[NodeRecord]:
        """A new job on the node: the kubelet's allocation and the processes NVML sees."""
        node.generation += 1
        node.job = self._job_name(node)
        namespace, job = node.job.split("/")
        pod = f"{job}-worker-{node.index}"
        response = api_pb2.ListPodResourcesResponse(pod_resources=[api_pb2.PodResources(
            name=pod, namespace=namespace, containers=[api_pb2.ContainerResources(
                name="trainer", devices=[api_pb2.ContainerDevices(
                    resource_name=GPU_RESOURCE, device_ids=[g.uuid for g in node.gpus])])])])
        alloc = [api_pb2.ContainerDevices(resource_name=GPU_RESOURCE, device_ids=[g.uuid for g in node.gpus])]
        now = datetime.now(UTC)
        pod_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{pod}/{node.generation}"))
        self.counts["pod_assignments"] += 1
        self.counts["gpu_processes"] += 1
        self.counts["pod_workloads"] += 1
        node.owners = PodWorkloads(node=node.name, record_id=f"pod-workloads:{node.name}:{self._stamp()}",
                                   changed_at=now, pods=(PodWorkload(namespace=namespace, pod=pod, uid=pod_uid,
                                   workload=WorkloadRef(kind="JobSet", group="jobset.x-k8s.io", namespace=namespace,
                                                        name=job, how="owner_chain", basis="Job → JobSet")),))
        node.next_owners_at = self._t + self.rates.workloads_heartbeat_s
        return [node.owners,
            PodAssignments(node=node.name, record_id=f"pod-assignments:{node.name}:{self._stamp()}", changed_at=now,
                           assignments=tuple(assignments(response.pod_resources, [GPU_RESOURCE])),
                           allocatable=tuple(allocatable(alloc, [GPU_RESOURCE]))),
            GpuProcesses(node=node.name, record_id=f"processes:{node.name}:{self._stamp()}", processes=tuple(
                GpuProcess(gpu_uuid=g.uuid, pid=self._pid(node, i), used_memory_bytes=70 << 30, pod_uid=pod_uid)
                for i, g in enumerate(node.gpus))),
        ]

    def health(self, node: SimNode) -> list[NodeRecord]:
        """A flat node's health records: each GPU's (its first, then at the heartbeat) and the node's."""
        reason = "first" if node.health_first else "heartbeat"
        node.health_first = False
        now = datetime.now(UTC)
        minutes = 0 if reason == "first" else 60
        hours = 0 if reason == "first" else 24
        out: list[NodeRecord] = []
        for g in node.gpus:
            self.counts["gpu_health"] += 1
            out.append(GpuHealth(
                node=node.name, record_id=f"gpu-health:{g.uuid}:{self._stamp()}", gpu_uuid=g.uuid,
                pci_bus_id=g.pci_bus_id, index=g.index, observed_at=now, published_for=reason,
                reading=_HEALTHY_READING, minutes=_history(60, now, minutes), hours=_history(3600, now, hours)))
        self.counts["node_gpu_health"] += 1
        pcis = tuple(g.pci_bus_id for g in node.gpus)
        out.append(NodeGpuHealth(node=node.name, record_id=f"node-gpu-health:{node.name}:{self._stamp()}",
                                 observed_at=now, nvml="ok", nvml_count=len(node.gpus), nvml_gpus=pcis,
                                 pci_gpus=pcis, expected_count=len(node.gpus), expected_from="inventory",
                                 kernel_release="6.8.0-45-generic", driver_version=self.driver,
                                 module_kernels=("6.8.0-45-generic",), module_signed=True, lockdown="none"))
        return out

    def _pid(self, node: SimNode, gpu: int) -> int:
        return 100_000 + (node.generation % 50) * 1000 + gpu

    def _stamp(self) -> str:
        self._serial += 1
        return f"{time.time_ns()}:{self._serial}"

    # --- kernel lines ---------------------------------------------------------------------------
    def kernel_line(self, node: SimNode, message: str) -> KernelLine | None:
        """A kmsg record as the agent publishes it; None when the pre-filter would drop it."""
        verdict = self.prefilter(message)
        if not verdict.keep:
            return None
        node.seq += 1
        now = datetime.now(UTC)
        return KernelLine(node=node.name, record_id=f"kmsg:{node.boot_id}:{node.seq}", source="kmsg",
                          message=message, fault=verdict.fault, boot_id=node.boot_id, seq=node.seq, priority=3,
                          monotonic_us=int((now - node.boot_time).total_seconds() * 1_000_000),
                          observed_at=now, event_at=now, boot_time=node.boot_time)

    def xid_line(self, node: SimNode, gpu: int, xid: int, process: str = APP_PROCESS) -> KernelLine | None:
        who = f"pid={self._pid(node, gpu)}, name={process}" if xid in APPLICATION_XIDS or process == BURST_PROCESS \
            else "pid='<unknown>', name=<unknown>"
        return self.kernel_line(node, f"NVRM: Xid (PCI:0000:{BUSES[gpu]}:00): {xid}, {who}, {XID_MIX[xid][1]}")

    def burst(self) -> Iterator[KernelLine]:
        """The large job's teardown: Xid 43 on every GPU of the burst nodes."""
        for node in self.burst_nodes:
            for gpu in range(GPUS_PER_NODE):
                line = self.xid_line(node, gpu, 43, BURST_PROCESS)
                if line is not None:
                    self.counts["burst_fault"] += 1
                    yield line

    # --- the clock ------------------------------------------------------------------------------
    def due(self, now: float, *, kernel: bool = True) -> Iterator[NodeRecord]:
        """Everything due between the last call and `now` (monotonic seconds)."""
        dt, self._t = max(0.0, now - self._t), now
        for node in self.fleet:
            if node.next_inventory_at and node.next_inventory_at <= now:
                node.next_inventory_at = now + self.rates.inventory_interval_s
                yield self.inventory(node)
            if node.next_job_at and node.next_job_at <= now:
                node.next_job_at = now + self.rng.expovariate(1.0 / self.rates.job_change_s)
                yield from self.job_change(node)
            elif node.owners is not None and node.next_owners_at <= now:  # the sensor's heartbeat: the same record
                node.next_owners_at = now + self.rates.workloads_heartbeat_s
                self.counts["pod_workloads_again"] += 1
                yield node.owners
            if node.next_health_at and node.next_health_at <= now:
                node.next_health_at = now + self.rates.health_heartbeat_s
                yield from self.health(node)
        if not kernel:
            return
        self._carry["kernel"] += self.rates.kernel_per_node_s * self.nodes * dt
        n, self._carry["kernel"] = int(self._carry["kernel"]), self._carry["kernel"] % 1
        for _ in range(n):
            node = self.fleet[self.rng.randrange(self.nodes)]
            gpu = self.rng.randrange(GPUS_PER_NODE)
            if self.rng.random() < self.rates.fault_share:
                line = self.xid_line(node, gpu, self.rng.choices(self._xids, self._weights)[0])
                self.counts["fault"] += 1
            else:
                line = self.kernel_line(node, self.rng.choice(BACKGROUND).format(bus=BUSES[gpu]))
                self.counts["kernel_background"] += 1
            if line is not None:
                yield line


# A healthy H100's reading: no ECC errors, no remapping, 18 NVLinks up and clean, PCIe Gen5 x16.
_HEALTHY_READING = HealthReading(
    recovery_action=0, retired_sbe=0, retired_dbe=0, retired_pending=False,
    nvlinks=tuple(LinkReading(link=i, active=True) for i in range(18)), nvlinks_seen=tuple(range(18)),
    pcie_replays=0, pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16, clocks_event_reasons=0,
    temperature_c=41, temperature_slowdown_c=87, slowdown_margin_c=46, power_mw=310_000, power_limit_mw=700_000,
    fabric_state=3, fabric_status=0)


def _history(step_s: int, end: datetime, n: int) -> HealthHistory:
    """`n` flat samples of `step_s` ending at `end` (a busy GPU: 44% of its power, Gen5 while busy)."""
    zeros: tuple[int | None, ...] = (0,) * n
    return HealthHistory(step_s=step_s, end=end if n else None, sbe=zeros, nvlink_crc=zeros, nvlink_replay=zeros,
                         pcie_replays=zeros, reasons=(0,) * n, margin_c=(46,) * n, power_pct=(44,) * n,
                         busy_gen=(5,) * n)


class FleetProducer:
    """Sends node records the way the agent's publisher does (its producer settings, keyed by `record_key`,
    to the record kind's topic under `topic_prefix`)."""

    def __init__(self, bootstrap: str, topic_prefix: str, *, linger_ms: int = 5) -> None:
        from kafka import KafkaProducer

        config: dict[str, Any] = producer_config(bootstrap, linger_ms=linger_ms)
        # One producer speaks for the whole fleet: more in flight than one node's agent needs.
        config.update(client_id="xidpipe-fleet-sim", delivery_timeout_ms=120_000, max_block_ms=60_000,
                      batch_size=64 * 1024)
        self.producer = KafkaProducer(**config)
        self.prefix = topic_prefix
        self.sent = 0
        self.failed = 0

    def send(self, record: NodeRecord) -> None:
        future = self.producer.send(f"{self.prefix}{topic_for(record)}", key=record_key(record).encode(),
                                    value=encode_node_record(record))
        future.add_errback(self._failed)
        self.sent += 1

    def _failed(self, _exc: BaseException) -> None:
        self.failed += 1

    def flush(self, timeout: float = 60.0) -> None:
        self.producer.flush(timeout)

    def close(self) -> None:
        self.producer.flush(60)
        self.producer.close(10)
