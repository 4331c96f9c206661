"""The GPU health poller's cost and a signal's time to its incident (`agent_bench.py --health`).

The agent runs as `xidpipe agent` on the fake libnvidia-ml.so.1 (compiled from tests/fakes/nvml against
nvml.h of the nvidia-nvml-dev wheel) with `gpus` GPUs and a local broker, twice for `seconds`: with
NVML on and the poller off, then with the poller at `interval`. The poller's cost is the difference
of the agent's CPU time (as a percentage of one core) and of its peak RSS. Then a pending row remapping
is scripted on GPU 0 and timed from the script's change to its incident, opened by the stream's own
mapping and store from the record read back from Kafka.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from models.node_records import NVML_TOPIC
from models.stream_policy import PipelinePolicy
from models.topics import topology
from streams.decode import decode_message
from streams.items import ItemMapper
from streams.store import Store
from xidpipe.localinfra.kafka import LocalKafka

REPO = Path(__file__).resolve().parent.parent
GPU = ("gpu uuid=GPU-bench-{i:04d} bus=00000000:{bus:02X}:00.0 nvlinks=18 recovery=0 retired_sbe=0 retired_dbe=0 "
       "retired_pending=0 pcie_replay=0 pcie_gen=5 pcie_gen_max=5 pcie_width=16 pcie_width_max=16 reasons=0x0 "
       "temp=55 power_draw=350000 ecc_sbe=3 remap=0,0,0,0")


def _fake_nvml(work: Path) -> Path:
    spec = importlib.util.find_spec("nvidia")
    bases = list(spec.submodule_search_locations or []) if spec else []
    headers = [h for base in bases for h in sorted(Path(base).glob("*/include/nvml.h"))]
    gcc = shutil.which("gcc")
    if not headers or gcc is None:
        raise SystemExit("--health needs gcc and nvml.h (pip install nvidia-nvml-dev)")
    out = work / "fake-nvml"
    out.mkdir()
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", f"-I{headers[0].parent}", "-o", str(out / "libnvidia-ml.so.1"),
                    str(REPO / "tests" / "fakes" / "nvml" / "fake_nvml.c"), "-lpthread"], check=True)
    return out


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _config(gpus: int, pending: bool = False) -> str:
    lines = ["driver 550.54.15", *(GPU.format(i=i, bus=0x10 + i) for i in range(gpus))]
    if pending:
        lines[1] = lines[1].replace("remap=0,0,0,0", "remap=0,1,1,0")
    return "\n".join(lines) + "\n"


def _sysfs(work: Path, gpus: int) -> Path:
    root = work / "sys"
    for i in range(gpus):
        dev = root / "bus" / "pci" / "devices" / f"0000:{0x10 + i:02x}:00.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x10de\n")
        (dev / "class").write_text("0x030200\n")
    return root


def _free_port() -> int:
    import socket

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


def _agent(work: Path, name: str, lib: Path, bootstrap: str, health: bool, interval: float,
           gpus: int) -> subprocess.Popen[bytes]:
    run = work / name
    run.mkdir()
    (run / "kern.log").write_text("")
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "XIDPIPE_FAKE_NVML_CONFIG": str(work / "nvml.conf"),
           "XIDPIPE_AGENT_HEALTH_ENABLED": "true" if health else "false",
           "XIDPIPE_AGENT_HEALTH_INTERVAL_S": str(interval), "XIDPIPE_AGENT_SYSFS_ROOT": str(_sysfs(run, gpus)),
           "XIDPIPE_AGENT_MODULES_ROOT": str(run / "modules"), "XIDPIPE_AGENT_NVIDIA_SMI": "absent"}
    log = open(run / "agent.log", "wb")  # noqa: SIM115 - the child's
    return subprocess.Popen(
        [sys.executable, "-m", "xidpipe.cli", "agent", "--source", "file", "--log-file", str(run / "kern.log"),
         "--node", f"bench-{name}", "--bootstrap-servers", bootstrap, "--state-dir", str(run / "state"), "--nvml",
         "--no-podresources", "--metrics-port", str(_free_port())], stdout=log, stderr=log, env=env, cwd=REPO)


def _cost(proc: subprocess.Popen[bytes], seconds: float) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of the agent over `seconds`, after a warm-up."""
    time.sleep(min(15.0, seconds / 4))
    cpu0, t0 = _cpu_seconds(proc.pid), time.monotonic()
    time.sleep(seconds)
    return (_cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0), _peak_rss_mb(proc.pid)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def _time_to_incident(work: Path, bootstrap: str, node: str, gpus: int, db: str) -> float:
    """Seconds from scripting a pending remap on GPU 0 to its incident, opened from the record on Kafka."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tp = TopicPartition(NVML_TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_end(tp)
    consumer.position(tp)
    store = Store(db, PipelinePolicy())
    store.create_schema()
    mapper = ItemMapper(policy=store.policy)
    kinds = topology().kinds_for(NVML_TOPIC)
    began = time.monotonic()
    _write(work / "nvml.conf", _config(gpus, pending=True))
    try:
        while time.monotonic() - began < 60:
            for batch in consumer.poll(timeout_ms=50).values():
                for m in batch:
                    rec = decode_message(topic=NVML_TOPIC, partition=0, offset=m.offset, key=m.key, value=m.value,
                                         kinds=kinds)
                    if getattr(rec, "node", None) != node:
                        continue
                    result = store.process(mapper.items(rec, NVML_TOPIC))  # type: ignore[arg-type]
                    if any(o.stream == "incidents" and o.payload["change"] == "opened" for o in result.outgoing):
                        return time.monotonic() - began
        raise SystemExit("the pending remap reached no incident within 60 s")
    finally:
        consumer.close()
        store.dispose()


def run(seconds: float, gpus: int, interval: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="xidpipe-health-bench-"))
    lib = _fake_nvml(work)
    _write(work / "nvml.conf", _config(gpus))
    with LocalKafka() as kafka:
        off = _agent(work, "off", lib, kafka.bootstrap, False, interval, gpus)
        try:
            cpu_off, rss_off = _cost(off, seconds)
        finally:
            _stop(off)
        on = _agent(work, "on", lib, kafka.bootstrap, True, interval, gpus)
        try:
            cpu_on, rss_on = _cost(on, seconds)
            latency = _time_to_incident(work, kafka.bootstrap, "bench-on", gpus, f"sqlite:///{work / 'bench.db'}")
        finally:
            _stop(on)
    cpu_pct, rss_mb = 100 * (cpu_on - cpu_off), rss_on - rss_off
    return {
        "benchmark": "agent_health", "gpus": gpus, "interval_s": interval, "seconds_each": seconds,
        "agent_cpu_percent_of_one_core": {"without_poller": round(100 * cpu_off, 3),
                                          "with_poller": round(100 * cpu_on, 3)},
        "agent_peak_rss_mb": {"without_poller": round(rss_off, 1), "with_poller": round(rss_on, 1)},
        "poller_cpu_percent_of_one_core": round(cpu_pct, 3), "poller_rss_mb": round(rss_mb, 1),
        "remap_pending_to_incident_s": round(latency, 2),
        "targets": {"poller_cpu_percent_of_one_core": 1, "poller_rss_mb": 10, "to_incident_s": interval + 1},
        "ok": cpu_pct <= 1 and rss_mb <= 10 and latency <= interval + 1,
        "python": sys.version.split()[0], "cpus": os.cpu_count(), "work": str(work),
    }


if __name__ == "__main__":
    print(json.dumps(run(60.0, 8, 10.0)))
