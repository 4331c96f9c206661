#!/usr/bin/env python3
"""`xidpipe replay` at cluster scale. Prints one JSON object.

Generates a recorded cluster into a temporary directory: --nodes nodes (default 500) with a syslog
kernel log of --lines lines each (default 4,000: 2M lines in all), about 95% ordinary kernel noise,
the GPU lines a node writes (driver load, persistence mode, each GPU's UUID and serial), and
faults on a share of the nodes: single application Xids, contained-then-uncorrectable ECC, GPUs
falling off the bus, NVLink bursts of 50 lines, NVSwitch SXids, and one job teardown (Xid 45 on
one node in eight within a minute); plus state.jsonl with each node's inventory and pods. Then
runs the replay in this process and reports wall time, kernel lines per second, peak RSS (this
process, generation included) and what the replay found. Target: a few minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.node_records import DeviceAssignment, GpuInfo, GpuInventory, PodAssignments
from xidpipe.replay import run_replay

START = datetime(2026, 11, 24, tzinfo=UTC)
SPAN_S = 86400.0
GPUS = ("18", "2a", "3b", "5d", "9a", "ab", "ba", "db")
NOISE = (
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "mlx5_core 0000:0c:00.0: mlx5_pcie_event:301:(pid 1411): PCIe slot advertised sufficient power (75W).",
    "cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice/pod4f1e",
    "audit: type=1400 audit(1764212047.100:311): apparmor=\"STATUS\" operation=\"profile_replace\" name=\"cri\"",
    "eth0: renamed from veth3f9a1c2",
    "IPVS: rr: TCP 10.96.0.1:443 - no destination available",
    "xfs filesystem being remounted at /var/lib/kubelet supports timestamps until 2038 (0x7fffffff)",
)
GPU_INFO = ("nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.127.05",
            "nvidia-uvm: Loaded the UVM driver, major device number 508.")


def uuid(node: int, gpu: int) -> str:
    return f"GPU-{node:08x}-0000-4000-8000-{gpu:012x}"


def serial(node: int, gpu: int) -> str:
    return f"{1654900000000 + node * 8 + gpu}"


def faults(i: int, rng: random.Random) -> dict[int, list[str]]:
    """Fault lines of node `i`, by the index of the line they replace."""
    out: dict[int, list[str]] = {}
    g = GPUS[i % len(GPUS)]
    if i % 5 == 0:
        out[rng.randrange(500, 3500)] = [f"NVRM: Xid (PCI:0000:{g}:00): 13, pid={1000 + i}, name=train_{i % 7}, "
                                         "Graphics SM Warp Exception on (GPC 2, TPC 0, SM 1): Illegal Instruction"]
    if i % 10 == 1:
        out[rng.randrange(500, 3000)] = [f"NVRM: Xid (PCI:0000:{g}:00): 94, pid={2000 + i}, name=trainer, "
                                         "Contained: SM (0x1). RST: No, D-RST: No"]
        out[rng.randrange(3000, 3900)] = [f"NVRM: Xid (PCI:0000:{g}:00): 48, pid='<unknown>', name=<unknown>, An "
                                          "uncorrectable double bit error (DBE) has been detected on GPU"]
    if i % 25 == 2:
        out[rng.randrange(500, 3900)] = [f"NVRM: Xid (PCI:0000:{g}:00): 79, pid='<unknown>', name=<unknown>, "
                                         "GPU has fallen off the bus.",
                                         f"NVRM: GPU 0000:{g}:00.0: GPU has fallen off the bus.",
                                         "NVRM: fallen off the bus and is not responding to commands."]
    if i % 20 == 3:
        at = rng.randrange(500, 3800)
        for k in range(50):
            out[at + k] = [f"NVRM: Xid (PCI:0000:{g}:00): 74, pid={3000 + i}, name=allreduce, NVLink: fatal error "
                           f"detected on link {k % 18}(0x0, 0x0, 0x0, 0x0, 0x10000, 0x0, 0x0)"]
    if i % 50 == 4:
        out[rng.randrange(500, 3900)] = ["nvidia-nvswitch0: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 52 "
                                         "egress non-posted PRIV error (First)"]
    if i % 8 == 5:  # the job teardown: line 2000 is the same minute on every node
        out[2000] = [f"NVRM: Xid (PCI:0000:{g}:00): 45, pid={4000 + i}, name=pretrain, Ch 00000010"]
    return out


def write_node(root: Path, i: int, lines: int, rng: random.Random) -> int:
    name = f"gpu-node-{i:03d}"
    step = SPAN_S / lines
    stamp = START + timedelta(seconds=(i % 60) * 0.01)
    head = ["NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024"]
    for n, g in enumerate(GPUS):
        head += [f"NVRM: GPU at PCI:0000:{g}:00: {uuid(i, n)}", f"NVRM: GPU Board Serial Number: {serial(i, n)}",
                 f"NVRM: GPU 0000:{g}:00.0: persistence mode enabled"]
    bad = faults(i, rng)
    written = 0
    with open(root / f"{name}.log", "w", encoding="utf-8") as out:
        for n in range(lines):
            t = stamp + timedelta(seconds=n * step)
            if n < len(head):
                texts = [head[n]]
            elif n in bad:
                texts = bad[n]
            elif rng.random() < 0.04:
                texts = [rng.choice(GPU_INFO)]
            else:
                texts = [rng.choice(NOISE)]
            for text in texts:
                out.write(f"{t:%b %d %H:%M:%S.%f} {name} kernel: {text}\n")
                written += 1
    return written


def state(i: int) -> list[str]:
    name = f"gpu-node-{i:03d}"
    inv = GpuInventory(node=name, record_id=f"inventory:{name}:1", emitted_at=START - timedelta(minutes=5),
                       driver_version="550.127.05", gpus=tuple(
                           GpuInfo(index=n, uuid=uuid(i, n), pci_bus_id=f"00000000:{g.upper()}:00.0",
                                   serial=serial(i, n), name="NVIDIA H100 80GB HBM3") for n, g in enumerate(GPUS)))
    pods = PodAssignments(node=name, record_id=f"pods:{name}:1", emitted_at=START - timedelta(minutes=1),
                          changed_at=START - timedelta(minutes=1), assignments=tuple(
                              DeviceAssignment(device_id=uuid(i, n), gpu_id=uuid(i, n), resource_name="nvidia.com/gpu",
                                               pod=f"job-{i // 8}-worker-{n}", namespace=f"team-{i % 7}",
                                               container="main") for n in range(len(GPUS))))
    return [inv.model_dump_json(), pods.model_dump_json()]


def generate(root: Path, nodes: int, lines: int, seed: int) -> int:
    rng = random.Random(seed)
    total = 0
    with open(root / "state.jsonl", "w", encoding="utf-8") as st:
        for i in range(nodes):
            total += write_node(root, i, lines, rng)
            st.write("\n".join(state(i)) + "\n")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--lines", type=int, default=4000, help="kernel lines per node")
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="xidpipe-replay-bench-") as tmp:
        root = Path(tmp) / "cluster"
        root.mkdir()
        t0 = time.monotonic()
        total = generate(root, args.nodes, args.lines, args.seed)
        generated_s = time.monotonic() - t0
        t1 = time.monotonic()
        result = run_replay(root)
        wall = time.monotonic() - t1
    body = result.to_dict()
    components: dict[str, int] = {}
    for inc in result.incidents:
        components[inc["component"]] = components.get(inc["component"], 0) + 1
    print(json.dumps({
        "nodes": args.nodes, "lines": total, "generate_s": round(generated_s, 1), "replay_wall_s": round(wall, 1),
        "lines_per_s": round(total / wall), "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                                                   / 1024),
        "lines_kept": result.stats.lines_kept, "store_batches": result.stats.batches, "fault_items": result.stats.items,
        "incidents": len(result.incidents), "incidents_by_component": components, "cordons": len(body["cordons"]),
        "breaker_tripped": body["breaker"]["tripped"], "tickets": len(body["tickets"]),
        "messages": len(body["messages"]), "python": platform.python_version(),
    }, indent=2))


if __name__ == "__main__":
    main()
