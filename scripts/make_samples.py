#!/usr/bin/env python3
"""Write the sample cluster's kernel logs used by `xidpipe demo` (deterministic output).

Five GPU nodes, each logged in a different format: journalctl -k short-precise, rsyslog kern.log,
dmesg -T, raw dmesg, and journalctl -k -o json. Line texts follow the NVIDIA driver's messages as
quoted in NVIDIA's Xid documentation and the Linux PCIe AER driver's messages. `state.jsonl` holds
the nodes' GPU inventories and kubelet pod assignments as the node agent publishes them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "xidpipe" / "samples" / "cluster"
DRIVER = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024"
UUIDS = {
    ("gpu-node-01", "18"): "GPU-5f1c2a9e-0b7d-4c1e-9a43-7d2e11a0c001",
    ("gpu-node-01", "3b"): "GPU-5f1c2a9e-0b7d-4c1e-9a43-7d2e11a0c002",
    ("gpu-node-02", "b7"): "GPU-a40e77c1-6d2f-4b8a-8c11-52c9f0e4b007",
    ("gpu-node-02", "ca"): "GPU-a40e77c1-6d2f-4b8a-8c11-52c9f0e4b008",
    ("gpu-node-03", "63"): "GPU-c3b9d004-91aa-4e0f-b6d2-0e8f7a6c3d63",
    ("gpu-node-04", "9a"): "GPU-e0d4a1b2-3c4d-4e5f-8a9b-0c1d2e3f409a",
    ("gpu-node-05", "4e"): "GPU-77aa01bc-2d3e-4f50-9162-738495a6b04e",
}
SERIALS = {
    ("gpu-node-02", "b7"): "1654923008817",
    ("gpu-node-03", "63"): "1654923011263",
}
NOISE = [
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "mlx5_core 0000:0c:00.0: mlx5_pcie_event:301:(pid 1411): PCIe slot advertised sufficient power (75W).",
    "cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice",
    "audit: type=1400 audit(1764212047.100:311): apparmor=\"STATUS\" operation=\"profile_replace\"",
    "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.127.05",
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 234",
    "pcieport 0000:00:01.0: AER: enabled with IRQ 27",
    "nvidia 0000:18:00.0: enabling device (0000 -> 0002)",
    "NVRM: GPU 0000:18:00.0: persistence mode enabled",
    "nvidia-uvm: Loaded the UVM driver, major device number 508.",
    "xfs filesystem being remounted at /var/lib/kubelet supports timestamps until 2038",
]


def identity(node: str, bus: str) -> list[str]:
    lines = [f"NVRM: GPU at PCI:0000:{bus}:00: {UUIDS[(node, bus)]}"]
    if (node, bus) in SERIALS:
        lines.append(f"NVRM: GPU Board Serial Number: {SERIALS[(node, bus)]}")
    return lines


def node01(rng: random.Random) -> list[tuple[float, str]]:
    """Application faults: one crash, and one workload that faults on two GPUs."""
    ev: list[tuple[float, str]] = [(4.1, DRIVER)]
    t = 9000.0
    ev += [(t, x) for x in identity("gpu-node-01", "18")]
    ev += [
        (t + 0.2, "NVRM: Xid (PCI:0000:18:00): 13, pid=41122, name=pt_main_thread, Graphics SM Warp Exception "
                  "on (GPC 4, TPC 1, SM 0): Out Of Range Address"),
        (t + 0.3, "NVRM: Xid (PCI:0000:18:00): 43, pid=41122, name=pt_main_thread, Ch 00000010"),
    ]
    t = 12500.0
    ev += [(t, x) for x in identity("gpu-node-01", "3b")]
    for i, bus in enumerate(("18", "3b")):
        ev.append((t + 60 * i, f"NVRM: Xid (PCI:0000:{bus}:00): 31, pid={52000 + i}, name=resnet_train, "
                               "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
                               "0x7f2a_12345000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"))
    return ev


def node02(rng: random.Random) -> list[tuple[float, str]]:
    """A failing GPU: Xid 13 from three different jobs, then memory errors."""
    ev: list[tuple[float, str]] = [(3.9, DRIVER)]
    t = 8123.0
    ev += [(t, x) for x in identity("gpu-node-02", "b7")]
    for i, (pid, name) in enumerate(((7311, "bert_finetune"), (9120, "vllm_worker"), (9981, "trainer"))):
        ev.append((t + 900 * i, f"NVRM: Xid (PCI:0000:b7:00): 13, pid={pid}, name={name}, Graphics SM Warp "
                                f"Exception on (GPC 2, TPC {i}, SM 1): Illegal Instruction Encoding"))
    t += 3000
    ev += [
        (t, "NVRM: Xid (PCI:0000:b7:00): 94, pid=10233, name=trainer, Contained: SM (0x1). RST: No, D-RST: No"),
        (t + 5, "NVRM: Xid (PCI:0000:b7:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit "
                "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."),
        (t + 6, "NVRM: Xid (PCI:0000:b7:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row "
                "(0x0000000000bf12a0) was marked for remapping, reset gpu to activate."),
    ]
    return ev


def node03(rng: random.Random) -> list[tuple[float, str]]:
    """A GPU falls off the bus: AER fatal from the root port, Xid 79, the three-line notice."""
    ev: list[tuple[float, str]] = [(4.0, DRIVER)]
    t = 20411.5
    ev += [(t - 100, x) for x in identity("gpu-node-03", "63")]
    ev += [
        (t, "pcieport 0000:60:01.1: AER: Uncorrected (Fatal) error received: 0000:63:00.0"),
        (t, "nvidia 0000:63:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, "
            "(Receiver ID)"),
        (t, "nvidia 0000:63:00.0: AER:   device [10de:2330] error status/mask=00000020/00000000"),
        (t, "nvidia 0000:63:00.0: AER:    [ 5] SDES                   (First)"),
        (t + 0.4, "NVRM: Xid (PCI:0000:63:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."),
        (t + 0.4, "NVRM: GPU 0000:63:00.0: GPU has fallen off the bus."),
        (t + 0.5, "NVRM: The NVIDIA GPU 0000:63:00.0"),
        (t + 0.5, "NVRM: (PCI ID: 10de:2330) installed in this system has"),
        (t + 0.5, "NVRM: fallen off the bus and is not responding to commands."),
        (t + 0.6, "NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] "
                  "(0x0000000F) returned from pRmApi->Control(pRmApi, RES_GET_CLIENT_HANDLE(pSubdevice), "
                  "RES_GET_HANDLE(pSubdevice), NV2080_CTRL_CMD_GPU_GET_ENGINES_V2, &getEngines, "
                  "sizeof(getEngines)) @ kern_bus.c:1123"),
    ]
    return ev


def node04(rng: random.Random) -> list[tuple[float, str]]:
    """An NVLink Xid storm: 800 lines in about 40 seconds, one incident."""
    ev: list[tuple[float, str]] = [(4.2, DRIVER)]
    t = 30000.0
    ev += [(t - 1, x) for x in identity("gpu-node-04", "9a")]
    for i in range(800):
        link = rng.choice((12, 13, 14, 15))
        ev.append((t + i * 0.05, f"NVRM: Xid (PCI:0000:9a:00): 74, pid='<unknown>', name=<unknown>, NVLink: "
                                 f"fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"))
    ev.append((t + 41, "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 32 egress non-posted "
                       "PRIV error (First)"))
    ev.append((t + 41, "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, Severity 0 Engine instance 32 "
                       "Sub-engine instance 00"))
    ev.append((t + 41, "nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 12028, Data {0x00000000, 0x00000000, "
                       "0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000}"))
    return ev


def node05(rng: random.Random) -> list[tuple[float, str]]:
    """A GSP timeout followed by a crash dump and the driver's recovery action."""
    ev: list[tuple[float, str]] = [(4.0, DRIVER)]
    t = 51200.0
    ev += [(t - 5, x) for x in identity("gpu-node-05", "4e")]
    ev += [
        (t, "NVRM: Xid (PCI:0000:4e:00): 119, pid=3317, name=nvidia-smi, Timeout after 6s of waiting for RPC "
            "response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4)."),
        (t + 1, "NVRM: A GPU crash dump has been created. If possible, please run"),
        (t + 1, "NVRM: nvidia-bug-report.sh as root to collect this data before"),
        (t + 1, "NVRM: the NVIDIA kernel module is unloaded."),
        (t + 2, "NVRM: Xid (PCI:0000:4e:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
                "(GPU Reset Required)"),
    ]
    return ev


def with_noise(rng: random.Random, events: list[tuple[float, str]], n: int) -> list[tuple[float, str]]:
    noise = [(rng.uniform(1, 60000), rng.choice(NOISE)) for _ in range(n)]
    return sorted(events + noise, key=lambda e: e[0])


BOOT_EPOCH = 1795600000  # 2026-11-25T09:46:40Z; the sample cluster's boot time


def fmt_journal_short(host: str, t: float) -> str:
    import datetime as dt

    d = dt.datetime.fromtimestamp(BOOT_EPOCH + t, dt.UTC)
    return f"{d:%b %d %H:%M:%S}.{d.microsecond:06d} {host} kernel: "


def write(name: str, lines: list[str]) -> None:
    (OUT / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    import datetime as dt

    rng = random.Random(7)
    OUT.mkdir(parents=True, exist_ok=True)
    ev = with_noise(rng, node01(rng), 300)
    write("gpu-node-01.log", [fmt_journal_short("gpu-node-01", t) + m for t, m in ev])

    ev = with_noise(rng, node02(rng), 300)
    out = []
    for t, m in ev:
        d = dt.datetime.fromtimestamp(BOOT_EPOCH + t, dt.UTC)
        out.append(f"{d:%b} {d.day:2d} {d:%H:%M:%S} gpu-node-02 kernel: [{t:12.6f}] {m}")
    out.insert(len(out) // 2, f"Nov 27 02:10:00 gpu-node-02 nvidia-device-plugin[2211]: XidCriticalError: Xid=48 "
                              f"on Device={UUIDS[('gpu-node-02', 'b7')]}, the device will go unhealthy.")
    write("gpu-node-02.log", out)

    ev = with_noise(rng, node03(rng), 300)
    out = []
    for t, m in ev:
        d = dt.datetime.fromtimestamp(BOOT_EPOCH + t, dt.UTC)
        out.append(f"[{d:%a %b %d %H:%M:%S %Y}] {m}")
    write("gpu-node-03.log", out)

    ev = with_noise(rng, node04(rng), 300)
    write("gpu-node-04.log", [f"[{t:12.6f}] {m}" for t, m in ev])

    ev = with_noise(rng, node05(rng), 200)
    out = []
    for i, (t, m) in enumerate(ev):
        out.append(json.dumps({
            "__CURSOR": f"s=5c1e0a;i={0x1000 + i:x};b=9d1f;m={int(t * 1e6):x};t={int((BOOT_EPOCH + t) * 1e6):x}",
            "__REALTIME_TIMESTAMP": str(int((BOOT_EPOCH + t) * 1_000_000)),
            "__MONOTONIC_TIMESTAMP": str(int(t * 1_000_000)),
            "_BOOT_ID": "9d1f6c2b7a4e4c0f8e3d2a1b0c9d8e7f",
            "_TRANSPORT": "kernel",
            "PRIORITY": "4",
            "SYSLOG_FACILITY": "0",
            "SYSLOG_IDENTIFIER": "kernel",
            "_HOSTNAME": "gpu-node-05",
            "_SOURCE_MONOTONIC_TIMESTAMP": str(int(t * 1_000_000)),
            "MESSAGE": m,
        }, separators=(",", ":")))
    write("gpu-node-05.log", out)


GPU_MODEL = "NVIDIA H100 80GB HBM3"
# (node, bus) → the pods that held the GPU, from an uptime on: (since, pod, namespace, container)
PODS: dict[tuple[str, str], list[tuple[float, str, str, str]]] = {
    ("gpu-node-01", "18"): [(1000, "resnet-train-0", "team-vision", "trainer")],
    ("gpu-node-01", "3b"): [(1000, "resnet-train-1", "team-vision", "trainer")],
    ("gpu-node-02", "b7"): [(7000, "bert-finetune-2", "team-nlp", "finetune"),
                            (8600, "vllm-serve-5", "team-serving", "vllm"),
                            (9500, "trainer-9", "team-vision", "trainer")],
    ("gpu-node-02", "ca"): [(7000, "vllm-serve-6", "team-serving", "vllm")],
    ("gpu-node-03", "63"): [(1000, "llm-pretrain-7-worker-3", "team-llm", "trainer")],
    ("gpu-node-04", "9a"): [(1000, "llm-pretrain-7-worker-4", "team-llm", "trainer")],
    ("gpu-node-05", "4e"): [(1000, "inference-gw-2", "team-serving", "server")],
}


def state_records() -> list[str]:
    """Inventory and pod-assignment records of the sample nodes (JSON, one per line)."""
    import datetime as dt

    from models.node_records import DeviceAssignment, GpuInfo, GpuInventory, PodAssignments, encode_node_record

    def at(uptime: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(BOOT_EPOCH + uptime, dt.UTC)

    out: list[str] = []
    nodes = sorted({node for node, _ in UUIDS})
    for node in nodes:
        buses = sorted(bus for n, bus in UUIDS if n == node)
        gpus = tuple(
            GpuInfo(index=i, uuid=UUIDS[(node, bus)], pci_bus_id=f"00000000:{bus.upper()}:00.0",
                    serial=SERIALS.get((node, bus), f"1654923{int(node[-2:]):02d}{int(bus, 16):04d}"),
                    name=GPU_MODEL, numa_node=0 if int(bus, 16) < 0x80 else 1)
            for i, bus in enumerate(buses)
        )
        out.append(encode_node_record(GpuInventory(
            node=node, record_id=f"inventory:{node}:1", emitted_at=at(60), driver_version="550.127.05",
            cuda_driver_version=12040, gpus=gpus)).decode())
        changes = sorted({since for bus in buses for since, *_ in PODS.get((node, bus), [])})
        for n, when in enumerate(changes, 1):
            assignments = []
            for bus in buses:
                current = [p for p in PODS.get((node, bus), []) if p[0] <= when]
                if current:
                    _, pod, ns, container = current[-1]
                    uuid = UUIDS[(node, bus)]
                    assignments.append(DeviceAssignment(device_id=uuid, gpu_id=uuid, resource_name="nvidia.com/gpu",
                                                        pod=pod, namespace=ns, container=container))
            out.append(encode_node_record(PodAssignments(
                node=node, record_id=f"pods:{node}:{n}", emitted_at=at(when), changed_at=at(when),
                assignments=tuple(assignments))).decode())
    return out


if __name__ == "__main__":
    main()
    (OUT / "state.jsonl").write_text("\n".join(state_records()) + "\n", encoding="utf-8")
