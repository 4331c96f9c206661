"""A recorded multi-node cluster for the order-independence tests: a replay directory (docs/replay.md)
generated from a seed, the same every time.

Twelve nodes of eight GPUs over 60 hours of event time, one kernel log each (ISO syslog stamps) and
the nodes' inventories and pod assignments in `state.jsonl`:

- application faults: jobs crash (Xid 13 then Xid 43 from one process), a job faults on several GPUs
  of its node at once (Xid 31), and one GPU fails three different jobs within a day (suspected
  hardware);
- GPUs fall off the bus: the root port's AER report, Xid 79, the driver's bus-loss lines and the
  node-level "GPU lost from the bus" line after them; one of those GPUs reports a contained ECC error
  (Xid 94) two hours later;
- an uncorrectable double-bit error (Xid 48 and its row remap, Xid 63) that recurs on the same GPU
  after more than the quiet period;
- a memory fleet burst: Xid 94 on ten nodes within five minutes, and one on four nodes of a rack,
  each within the fleet window of the one before; contained ECC errors (Xid 94) here and there;
- a GSP timeout with its crash dump and the recovery action (Xid 119, the dump, Xid 154), an NVLink
  storm (Xid 74), and GPU lines that are no fault.

Faults come at least a few seconds apart on a node except the lines of one occurrence, so a kernel
record is whole whichever reader splits the log.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from models.node_records import (
    DeviceAssignment,
    GpuInfo,
    GpuInventory,
    NodeRecord,
    PodAssignments,
    encode_node_record,
)

START = datetime(2026, 3, 2, 0, 0, 0, tzinfo=UTC)
HOURS = 60
BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
GPU_MODEL = "NVIDIA H100 80GB HBM3"
NAMESPACES = ("team-nlp", "team-vision", "team-llm", "team-serving")
JOB_HOURS = 5.0  # a node's jobs change every this many hours
NOISE = (
    "NVRM: GPU 0000:{bus}:00.0: persistence mode enabled",
    "nvidia 0000:{bus}:00.0: irq 123 for MSI/MSI-X",
    "NVRM: GPU at 0000:{bus}:00.0 has software scheduler DISABLED with policy BEST_EFFORT.",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
)
APP = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address",
    31: "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_8 faulted @ 0x73ac_1c000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
    43: "Ch 00000008",
}
DBE = ("An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
       "subpartition 0.")
REMAP = "Row Remapper: New row (0x0000000000bf12a0) was marked for remapping, reset gpu to activate."
CONTAINED = "Contained: SM (0x1). RST: No, D-RST: No"


def node_name(n: int) -> str:
    return f"rec-node-{n:02d}"


def gpu_uuid(n: int, i: int) -> str:
    return f"GPU-{n:08x}-7a1c-4e0f-9b2d-{i:012x}"


def serial(n: int, i: int) -> str:
    return f"1653923{n:03d}{i:03d}"


@dataclass
class _Node:
    n: int
    lines: list[tuple[datetime, str]] = field(default_factory=list)
    # per GPU: (since, namespace, pod, container), in time order
    pods: dict[int, list[tuple[datetime, str, str, str]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return node_name(self.n)

    def add(self, at: datetime, text: str) -> None:
        self.lines.append((at, text))

    def pod_at(self, gpu: int, at: datetime) -> tuple[str, str, str]:
        held = [p for p in self.pods.get(gpu, []) if p[0] <= at]
        return held[-1][1:] if held else ("default", "unknown-0", "main")


def _xid(bus: str, xid: int, text: str, pid: int | None = None, name: str | None = None) -> str:
    who = f"pid={pid}, name={name}" if pid is not None else "pid='<unknown>', name=<unknown>"
    return f"NVRM: Xid (PCI:0000:{bus}:00): {xid}, {who}, {text}"


def _h(hours: float) -> datetime:
    return START + timedelta(hours=hours)


class _Builder:
    def __init__(self, nodes: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.nodes = [_Node(n) for n in range(nodes)]
        self.pid = 40_000

    def next_pid(self) -> int:
        self.pid += self.rng.randint(3, 40)
        return self.pid

    def boot(self) -> None:
        for node in self.nodes:
            for i, bus in enumerate(BUSES):
                at = START + timedelta(seconds=5 + i)
                node.add(at, f"NVRM: GPU at PCI:0000:{bus}:00: {gpu_uuid(node.n, i)}")
                node.add(at, f"NVRM: GPU Board Serial Number: {serial(node.n, i)}")

    def jobs(self) -> None:
        """Every JOB_HOURS a node gets new jobs: some on one GPU, one on several GPUs at once."""
        for node in self.nodes:
            epoch = 0
            t = 0.0
            while t < HOURS:
                since = _h(t)
                wide = self.rng.sample(range(8), 3)
                ns = NAMESPACES[(node.n + epoch) % len(NAMESPACES)]
                for i in range(8):
                    if i in wide:
                        pod = (ns, f"pretrain-{node.n}-{epoch}-{wide.index(i)}", "trainer")
                    else:
                        pod = (NAMESPACES[(i + epoch) % len(NAMESPACES)], f"job-{node.n}x{i}x{epoch}-{i}", "main")
                    node.pods.setdefault(i, []).append((since, *pod))
                epoch += 1
                t += JOB_HOURS

    def noise(self) -> None:
        for node in self.nodes:
            for _ in range(120):
                at = START + timedelta(seconds=self.rng.uniform(60, HOURS * 3600))
                node.add(at, self.rng.choice(NOISE).format(bus=self.rng.choice(BUSES)))

    def crashes(self) -> None:
        """Application crashes: Xid 13 then Xid 43 from one process; a wide job's Xid 31 on its GPUs."""
        for node in self.nodes:
            t = self.rng.uniform(0.5, 3.0)
            while t < HOURS - 1:
                gpu = self.rng.randrange(8)
                if node.n == 3 and gpu == 2:
                    gpu = 3  # rec-node-03's GPU 2 fails on its own (`bad_gpu`)
                pid = self.next_pid()
                at = _h(t)
                name = node.pod_at(gpu, at)[2]
                node.add(at, _xid(BUSES[gpu], 13, APP[13], pid, name))
                node.add(at + timedelta(seconds=0.3), _xid(BUSES[gpu], 43, APP[43], pid, name))
                t += self.rng.uniform(1.5, 5.0)
            wide_at = self.rng.uniform(2, HOURS - 2)
            held = [i for i in range(8) if node.pod_at(i, _h(wide_at))[1].startswith("pretrain-")]
            for k, gpu in enumerate(held):
                node.add(_h(wide_at) + timedelta(seconds=2 * k), _xid(BUSES[gpu], 31, APP[31], self.next_pid(),
                                                                      "trainer"))

    def bad_gpu(self) -> None:
        """rec-node-03's GPU 2 fails three different jobs within 20 hours."""
        node = self.nodes[3]
        for hours in (6.2, 16.4, 26.1):
            at = _h(hours)
            node.add(at, _xid(BUSES[2], 13, APP[13], self.next_pid(), node.pod_at(2, at)[2]))

    def off_the_bus(self, n: int, gpu: int, hours: float, after: str | None = None) -> None:
        node = self.nodes[n]
        bus = BUSES[gpu]
        at = _h(hours)
        port = f"0000:{int(bus, 16) - 3:02x}:01.1"
        node.add(at, f"pcieport {port}: AER: Uncorrected (Fatal) error received: 0000:{bus}:00.0")
        node.add(at, f"nvidia 0000:{bus}:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), "
                     "type=Transaction Layer, (Receiver ID)")
        node.add(at, f"nvidia 0000:{bus}:00.0: AER:   device [10de:2330] error status/mask=00000020/00000000")
        node.add(at, f"nvidia 0000:{bus}:00.0: AER:    [ 5] SDES                   (First)")
        at += timedelta(seconds=0.4)
        node.add(at, _xid(bus, 79, "GPU has fallen off the bus."))
        node.add(at, f"NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus.")
        at += timedelta(seconds=0.1)
        node.add(at, f"NVRM: The NVIDIA GPU 0000:{bus}:00.0")
        node.add(at, "NVRM: (PCI ID: 10de:2330) installed in this system has")
        node.add(at, "NVRM: fallen off the bus and is not responding to commands.")
        at += timedelta(seconds=0.5)
        node.add(at, "NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] "
                     "(0x0000000F) returned from pRmApi->Control(pRmApi, RES_GET_CLIENT_HANDLE(pSubdevice), "
                     "RES_GET_HANDLE(pSubdevice), NV2080_CTRL_CMD_GPU_GET_ENGINES_V2, &getEngines, "
                     "sizeof(getEngines)) @ kern_bus.c:1123")
        if after == "contained":  # the card, reset, reports a contained ECC error two hours later
            node.add(_h(hours + 2), _xid(bus, 94, CONTAINED, self.next_pid(), "trainer"))

    def double_bit(self, n: int, gpu: int, hours: float) -> None:
        node = self.nodes[n]
        at = _h(hours)
        node.add(at, _xid(BUSES[gpu], 48, DBE))
        node.add(at + timedelta(seconds=1), _xid(BUSES[gpu], 63, REMAP))

    def memory_burst(self, hours: float, nodes: list[int]) -> None:
        for k, n in enumerate(nodes):
            at = _h(hours) + timedelta(seconds=25 * k + self.rng.uniform(0, 5))
            self.nodes[n].add(at, _xid(BUSES[(n + k) % 8], 94, CONTAINED, self.next_pid(), "trainer"))

    def memory_errors(self, per_node: int) -> None:
        """Contained ECC errors (Xid 94) at random times on random GPUs of every node."""
        for node in self.nodes:
            for _ in range(per_node):
                at = START + timedelta(seconds=self.rng.uniform(1800, (HOURS - 1) * 3600))
                node.add(at, _xid(BUSES[self.rng.randrange(8)], 94, CONTAINED, self.next_pid(), "trainer"))

    def gsp(self, n: int, gpu: int, hours: float) -> None:
        node, bus, at = self.nodes[n], BUSES[gpu], _h(hours)
        node.add(at, _xid(bus, 119, "Timeout after 6s of waiting for RPC response from GPU1 GSP! Expected function "
                                    "76 (GSP_RM_CONTROL) (0x20800a4c 0x4).", self.next_pid(), "nvidia-smi"))
        for text in ("NVRM: A GPU crash dump has been created. If possible, please run",
                     "NVRM: nvidia-bug-report.sh as root to collect this data before",
                     "NVRM: the NVIDIA kernel module is unloaded."):
            node.add(at + timedelta(seconds=1), text)
        node.add(at + timedelta(seconds=2), _xid(bus, 154, "GPU recovery action changed from 0x0 (None) to 0x1 "
                                                           "(GPU Reset Required)"))

    def nvlink_storm(self, n: int, gpu: int, hours: float, lines: int) -> None:
        node, at = self.nodes[n], _h(hours)
        for k in range(lines):
            node.add(at + timedelta(seconds=0.2 * k), _xid(BUSES[gpu], 74, "NVLink: fatal error detected on link "
                                                                          f"{12 + k % 4}(0x0, 0x0, 0x10000, 0x0, "
                                                                          "0x0, 0x0, 0x0)"))


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _state(nodes: list[_Node]) -> list[str]:
    out: list[str] = []
    for node in nodes:
        gpus = tuple(GpuInfo(index=i, uuid=gpu_uuid(node.n, i), pci_bus_id=f"00000000:{bus.upper()}:00.0",
                             serial=serial(node.n, i), name=GPU_MODEL) for i, bus in enumerate(BUSES))
        booted = START - timedelta(minutes=10)
        out.append(encode_node_record(GpuInventory(node=node.name, record_id=f"inventory:{node.name}:1",
                                                   emitted_at=booted, boot_time=booted,
                                                   driver_version="550.127.05", gpus=gpus)).decode())
        changes = sorted({p[0] for held in node.pods.values() for p in held})
        for k, when in enumerate(changes, 1):
            assignments = tuple(
                DeviceAssignment(device_id=gpu_uuid(node.n, i), gpu_id=gpu_uuid(node.n, i),
                                 resource_name="nvidia.com/gpu", namespace=ns, pod=pod, container=c)
                for i in range(8) for ns, pod, c in [node.pod_at(i, when)])
            out.append(encode_node_record(PodAssignments(node=node.name, record_id=f"pods:{node.name}:{k}",
                                                         emitted_at=when, changed_at=when,
                                                         assignments=assignments)).decode())
    return out


@dataclass(frozen=True)
class Recording:
    root: Path
    nodes: list[str]
    faults: int  # fault lines written (Xid lines, AER headers, bus-loss and driver lines count one each)


def write_recording(root: Path, nodes: int = 12, seed: int = 23) -> Recording:
    """Write the recorded cluster into `root` (created); returns what it holds."""
    b = _Builder(nodes, seed)
    b.boot()
    b.jobs()
    b.noise()
    b.crashes()
    b.bad_gpu()
    b.off_the_bus(4, 5, 10.0, after="contained")
    b.off_the_bus(5, 1, 33.0)
    b.off_the_bus(9, 6, 47.5)
    b.double_bit(6, 1, 20.0)
    b.double_bit(6, 1, 30.0)  # ten hours later, past the quiet period: a recurrence
    b.double_bit(8, 4, 52.0)
    b.memory_burst(40.0, list(range(10)))
    b.memory_errors(3)
    for k, n in enumerate((2, 5, 7, 11, 3)):  # a rack's nodes one after another, 4 minutes apart
        b.nodes[n].add(_h(24.5) + timedelta(minutes=4 * k), _xid(BUSES[6], 94, CONTAINED, b.next_pid(), "trainer"))
    b.gsp(7, 3, 14.0)
    b.nvlink_storm(10, 0, 22.0, 60)
    root.mkdir(parents=True, exist_ok=True)
    faults = 0
    for node in b.nodes:
        lines = sorted(node.lines, key=lambda e: e[0])
        faults += sum(1 for _, text in lines if "Xid" in text or "AER: Uncorrected" in text or "GPU lost" in text)
        body = "\n".join(f"{_stamp(at)} {node.name} kernel: {text}" for at, text in lines) + "\n"
        (root / f"{node.name}.log").write_text(body, encoding="utf-8")
    (root / "state.jsonl").write_text("\n".join(_state(b.nodes)) + "\n", encoding="utf-8")
    return Recording(root, [n.name for n in b.nodes], faults)


# --- what the order-independence tests compare ------------------------------------------------------

# The action requests compared per incident: a cordon candidate, its ticket, the messages of its opening
# and of its resolution. Repeats and reclassifications are told as they are seen (at most once per
# update interval, on arrival time), so how many there are depends on timing; and an incident found
# after a later one of its component (a fleet burst of a node whose records came late) follows none,
# so its ticket is created where, found first, it would reopen the earlier one's.
COMPARED_ACTIONS = {("cordon_candidate", "cordon"): "cordon", ("ticket", "create"): "ticket",
                    ("ticket", "reopen"): "ticket", ("notification", "opened"): "opened",
                    ("notification", "reopened"): "opened", ("notification", "resolved"): "resolved"}


def incident_facts(engine: Any) -> list[tuple[Any, ...]]:
    """Every incident of a stream store's database (those merged into another left out), as the tests
    compare them: fingerprint, component and its id, codes, count, category, family, status, first and
    last fault, and the action requests of `COMPARED_ACTIONS` it got; sorted."""
    import sqlalchemy as sa
    from sqlalchemy.orm import Session

    from history.tables import Incident, OutboxMessage

    with Session(engine) as s:
        actions: dict[str, set[str]] = {}
        for payload in s.scalars(sa.select(OutboxMessage.payload).where(OutboxMessage.stream == "actions")):
            asked = COMPARED_ACTIONS.get((str(payload.get("kind")), str(payload.get("operation"))))
            if asked is not None:
                actions.setdefault(str(payload.get("incident_id")), set()).add(asked)
        rows = s.scalars(sa.select(Incident).where(Incident.merged_into.is_(None))).all()
        return sorted((r.fingerprint, r.component, r.component_id, tuple(sorted(r.codes or ())), r.count, r.category,
                       r.family, r.status, r.first_seen.isoformat(), r.last_seen.isoformat(),
                       tuple(sorted(actions.get(r.incident_id, ())))) for r in rows)


def node_records(root: Path) -> tuple[list[NodeRecord], dict[str, list[NodeRecord]]]:
    """What the node agents publish for the recorded cluster in `root`: the state file's records, and per
    node its kernel-log records as the agent's file source reads the log (`xidpipe.replay.records`)."""
    from xidpipe.replay.layout import open_cluster_dir
    from xidpipe.replay.records import ClusterRecords

    cluster = ClusterRecords(open_cluster_dir(root))
    return list(cluster.state), {log.node: [rec for _, _, rec in log.entries()] for log in cluster.logs}


def interleaved(per_node: dict[str, list[NodeRecord]], seed: int, chunk: tuple[int, int] = (1, 40)) -> list[NodeRecord]:
    """The nodes' records as many agents send them: each node's in its own order, the nodes' runs of
    random length in a random order."""
    rnd = random.Random(seed)
    queues = {n: list(recs) for n, recs in sorted(per_node.items())}
    out: list[NodeRecord] = []
    while any(queues.values()):
        node = rnd.choice([n for n, q in queues.items() if q])
        take = rnd.randint(*chunk)
        out += queues[node][:take]
        del queues[node][:take]
    return out
