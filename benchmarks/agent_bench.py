#!/usr/bin/env python3
"""Node agent cost and latency. Prints one JSON object.

Starts its own local Kafka broker (Maven jars, `xidpipe dev kafka fetch`), creates the kernel topic
with `message.timestamp.type=LogAppendTime` (so each record's timestamp is when the broker appended,
i.e. acknowledged, it), and runs `xidpipe agent --source file` as a child process while this
process appends kernel lines to the file at --rate lines per second (--gpu-share of them Xid
lines stamped with their write time) for --seconds.

Reported: the agent's CPU time over the writing window as a percentage of one core, its peak RSS
(VmHWM), and the latency from a GPU line being written to the broker appending its record
(p50/p99/max). Targets: CPU <= 5 %, RSS <= 80 MB, p99 <= 50 ms.

With --health: the GPU health poller's cost instead. The agent runs twice on the fake
libnvidia-ml.so.1 (tests/fakes/nvml, compiled here) with --gpus GPUs, NVML on, for --seconds each:
without the poller, then with it at --interval. Reported: the poller's CPU (the difference, as a
percentage of one core) and memory (the difference of peak RSS); then a pending row remapping is
scripted on one GPU and timed until its incident opens (the record read back from Kafka, mapped and
stored as the worker does). Targets: at most 1 % of a core, 10 MB, and the interval plus one second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from models.node_records import KERNEL_TOPIC
from xidpipe.localinfra.kafka import LocalKafka

NOISE = (
    "kernel: EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none.",
    "kernel: IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    "kernel: cali5e2f81a0c3b: Link UP",
    "kernel: audit: type=1400 audit(1764212047.100:311): apparmor=\"STATUS\" operation=\"profile_replace\"",
    "kernel: IPVS: rr: TCP 10.96.0.1:443 - no destination available",
)
GPU = "kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics SM Warp Exception bench_ns={ns}"
STAMP = re.compile(r"bench_ns=(\d+)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def _start_agent(work: Path, log_file: Path, bootstrap: str) -> tuple[subprocess.Popen[bytes], Any]:
    agent_log = open(work / "agent.log", "wb")  # noqa: SIM115
    agent = subprocess.Popen(
        [sys.executable, "-m", "xidpipe.cli", "agent", "--source", "file", "--log-file", str(log_file),
         "--node", "bench-node", "--bootstrap-servers", bootstrap, "--state-dir", str(work / "state"),
         "--no-nvml", "--no-podresources", "--metrics-port", str(_free_port())],
        stdout=agent_log, stderr=agent_log,
    )
    return agent, agent_log


def _warm_up(consumer: Any, log_file: Path, work: Path) -> None:
    """One GPU line through to Kafka before measuring."""
    with open(log_file, "a") as fh:
        fh.write(GPU.format(ns=0) + "\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(consumer.poll(timeout_ms=200).values()):
            return
    raise SystemExit("the agent did not publish within 60 s; see " + str(work / "agent.log"))


def _write_load(log_file: Path, seconds: float, rate: int, gpu_share: float) -> tuple[int, int]:
    """Append `rate` lines a second for `seconds`, every 1/gpu_share-th a GPU line; returns (lines, GPU lines)."""
    every = max(1, round(1 / gpu_share)) if gpu_share > 0 else 0
    tick = 0.01
    written = gpu_written = 0
    t0 = time.monotonic()
    with open(log_file, "a", buffering=1) as fh:
        next_tick = t0
        while time.monotonic() - t0 < seconds:
            target = int((time.monotonic() - t0 + tick) * rate)
            chunk = []
            while written < target:
                written += 1
                if every and written % every == 0:
                    gpu_written += 1
                    chunk.append(GPU.format(ns=time.time_ns()))
                else:
                    chunk.append(NOISE[written % len(NOISE)] + f" #{written}")
            if chunk:
                fh.write("\n".join(chunk) + "\n")
                fh.flush()
            next_tick += tick
            time.sleep(max(0.0, next_tick - time.monotonic()))
    return written, gpu_written


def _latencies(consumer: Any, expected: int) -> list[float]:
    """Broker append time minus the time stamped in each GPU line, in ms."""
    latencies: list[float] = []
    deadline = time.monotonic() + 60
    while len(latencies) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            for rec in batch:
                m = STAMP.search(json.loads(rec.value).get("message", ""))
                if m and int(m.group(1)):
                    latencies.append(rec.timestamp - int(m.group(1)) / 1e6)
    return latencies


def _measure(args: argparse.Namespace, work: Path, log_file: Path, bootstrap: str) -> dict[str, Any]:
    from kafka import KafkaConsumer, TopicPartition

    agent, agent_log = _start_agent(work, log_file, bootstrap)
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        tp = TopicPartition(KERNEL_TOPIC, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        _warm_up(consumer, log_file, work)
        cpu0, t0 = _cpu_seconds(agent.pid), time.monotonic()
        written, gpu_written = _write_load(log_file, args.seconds, args.rate, args.gpu_share)
        wall = time.monotonic() - t0
        cpu = _cpu_seconds(agent.pid) - cpu0
        latencies = _latencies(consumer, gpu_written)
        consumer.close()
        rss = _peak_rss_mb(agent.pid)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(20)
        except subprocess.TimeoutExpired:
            agent.kill()
        agent_log.close()
    return {"wall": wall, "cpu": cpu, "rss": rss, "written": written, "gpu_written": gpu_written,
            "latencies": latencies}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=1000, help="kernel lines per second")
    ap.add_argument("--gpu-share", type=float, default=0.01, help="share of GPU lines")
    ap.add_argument("--health", action="store_true", help="measure the GPU health poller instead")
    ap.add_argument("--gpus", type=int, default=8, help="--health: fake GPUs")
    ap.add_argument("--interval", type=float, default=10.0, help="--health: the poll interval, seconds")
    args = ap.parse_args()
    if args.health:
        from benchmarks.health_cost import run as health

        result = health(args.seconds, args.gpus, args.interval)
        print(json.dumps(result))
        return 0 if result["ok"] else 1

    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    work = Path(tempfile.mkdtemp(prefix="xidpipe-agent-bench-"))
    log_file = work / "kern.log"
    log_file.write_text("")
    with LocalKafka() as kafka:
        admin = KafkaAdminClient(bootstrap_servers=kafka.bootstrap)
        admin.create_topics([NewTopic(KERNEL_TOPIC, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
        admin.close()
        m = _measure(args, work, log_file, kafka.bootstrap)

    latencies, wall, rss = m["latencies"], m["wall"], m["rss"]
    cpu_pct = 100 * m["cpu"] / wall
    p99 = _percentile(latencies, 0.99)
    result = {
        "benchmark": "agent",
        "seconds": round(wall, 1),
        "lines_per_s": args.rate,
        "lines_written": m["written"],
        "gpu_lines_written": m["gpu_written"],
        "gpu_lines_received": len(latencies),
        "cpu_percent_of_one_core": round(cpu_pct, 2),
        "peak_rss_mb": round(rss, 1),
        "latency_ms": {"p50": round(_percentile(latencies, 0.5), 1), "p99": round(p99, 1),
                       "max": round(max(latencies, default=float("nan")), 1)},
        "targets": {"cpu_percent_of_one_core": 5, "peak_rss_mb": 80, "latency_p99_ms": 50},
        "ok": cpu_pct <= 5 and rss <= 80 and p99 <= 50 and len(latencies) == m["gpu_written"],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
