"""The NVML sensor against the fake libnvidia-ml.so.1, through nvidia-ml-py's real ctypes code: what it
publishes, the GPUs it reports to the agent and the evidence it asks for."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

GPU0 = "GPU-0b6d3bf1-6a53-4b34-9e1f-6b1a7f5a0c01"
GPU1 = "GPU-1c7e4c02-7b64-4c45-af20-7c2b806b1d12"
MIG0 = "MIG-5f4a1d3e-2b1c-5d6e-8f70-1a2b3c4d5e6f"
CID = "3f1b9c0d2e4a5b6c7d8e9f00112233445566778899aabbccddeeff0011223344"
POD = "1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9"

BASE = f"""driver 550.54.15
cuda 12040
gpu uuid={GPU0} serial=1650123456789 name=NVIDIA_H100_80GB_HBM3 bus=00000000:3B:00.0 numa=0 mig=1 \
nvlinks=4 ecc_dbe=2 remap=0,1,0,0 minor=3
gpu uuid={GPU1} bus=00000000:5E:00.0 unsupported=numa,nvlink,remap,serial,ecc,minor
mig gpu=0 uuid={MIG0} gi=2 ci=0
proc gpu=1 pid=4242 mem=1048576
"""


def write_config(path: Path, text: str) -> None:
    """Replace the fake's script atomically: it re-reads the file whenever it changes."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Probe:
    def __init__(self, lib: Path, config: Path, proc_root: Path) -> None:
        env = {**os.environ, "LD_LIBRARY_PATH": str(lib), "XIDPIPE_FAKE_NVML_CONFIG": str(config)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.agents.nvml_probe", str(proc_root)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
        )
        self.records: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.records.put(json.loads(line))

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 15) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                rec = self.records.get(timeout=0.1)
            except queue.Empty:
                assert self.proc.poll() is None, self.proc.stderr.read() if self.proc.stderr else ""
                continue
            if pred(rec):
                return rec
        raise AssertionError("no matching record")

    def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.wait_for(lambda r: r["kind"] == "metrics", timeout_s=20)


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    (root / "4242").mkdir(parents=True)
    (root / "4242" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD.replace('-', '_')}.slice/"
        f"cri-containerd-{CID}.scope\n"
    )
    # sysfs: GPU 0 sits behind the root port 0000:3a:00.0; GPU 1 has no sysfs entry.
    port = root / "sys" / "devices" / "pci0000:3a" / "0000:3a:00.0" / "0000:3b:00.0"
    port.mkdir(parents=True)
    (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    (root / "sys" / "bus" / "pci" / "devices" / "0000:3b:00.0").symlink_to(port)
    return root


def test_inventory_processes_events_and_lost_gpu(fake_nvml_lib: Path, tmp_path: Path, proc_root: Path) -> None:
    config = tmp_path / "nvml.conf"
    write_config(config, BASE)
    probe = Probe(fake_nvml_lib, config, proc_root)
    try:
        inv = probe.wait_for(lambda r: r["kind"] == "inventory")
        assert inv["driver_version"] == "550.54.15" and inv["cuda_driver_version"] == 12040
        g0, g1 = inv["gpus"]
        assert g0["uuid"] == GPU0 and g0["serial"] == "1650123456789" and g0["name"] == "NVIDIA H100 80GB HBM3"
        assert g0["pci_bus_id"] == "00000000:3B:00.0" and g0["numa_node"] == 0
        assert (g0["index"], g0["minor_number"]) == (0, 3) and (g1["index"], g1["minor_number"]) == (1, None)
        assert g0["mig_mode_current"] == 1
        assert g0["mig_devices"] == [{"uuid": MIG0, "index": 0, "gpu_instance_id": 2, "compute_instance_id": 0}]
        assert g0["nvlink_active"] == [True, True, True, True, False, False]
        assert g0["ecc"]["volatile_uncorrected"] == 2
        assert g0["remapped_rows"] == {"correctable": 0, "uncorrectable": 1, "pending": False, "failure": False}
        assert g0["power_limit_mw"] == 700000 and g0["temperature_shutdown_c"] == 92
        assert g0["inforom_versions"] == {"oem": "G520.0200.00.05"}
        assert g1["serial"] is None and g1["numa_node"] is None and g1["nvlink_active"] is None
        # Each GPU's upstream bridges from sysfs, root port first (a root port's AER report is the GPU's below).
        assert (g0["upstream_bridges"], g1["upstream_bridges"]) == (["0000:3a:00.0"], [])
        assert {"serial", "numa_node", "nvlink", "remapped_rows", "ecc", "minor_number"} <= set(g1["unsupported"])
        # The GPUs it read go to the agent: their addresses and GPU 0's root port (the pre-filter keeps
        # their AER lines), the GPUs themselves (the evidence collector names the GPU at an address).
        gpus = probe.wait_for(lambda r: r["kind"] == "gpus")
        assert gpus["uuids"] == [GPU0, GPU1]
        assert gpus["addresses"] == ["0000:3b:00.0", "0000:3a:00.0", "0000:5e:00.0"]

        procs = probe.wait_for(lambda r: r["kind"] == "gpu_processes")
        assert procs["processes"] == [{"gpu_uuid": GPU1, "pid": 4242, "used_memory_bytes": 1048576,
                                       "gpu_instance_id": None, "compute_instance_id": None,
                                       "container_id": CID, "pod_uid": POD}]

        # Scripted events: an Xid attributed to a MIG instance, a double-bit ECC error, a recovery action.
        write_config(config, BASE + "event id=1 gpu=0 type=8 data=94 gi=2 ci=0\n"
                                 "event id=2 gpu=1 type=2 data=0\n"
                                 "event id=3 gpu=1 type=0x8000 data=2\n")
        xid = probe.wait_for(lambda r: r["kind"] == "nvml_event" and r["event_type"] == "xid_critical")
        assert (xid["gpu_uuid"], xid["xid"], xid["gpu_instance_id"], xid["compute_instance_id"]) == (GPU0, 94, 2, 0)
        assert xid["pci_bus_id"] == "00000000:3B:00.0"
        trigger = probe.wait_for(lambda r: r["kind"] == "evidence_trigger")
        assert trigger == {"kind": "evidence_trigger", "trigger_record_id": xid["record_id"], "bus": "0000:3b:00.0",
                           "gpu_uuid": GPU0, "xid": 94, "pid": None}
        dbe = probe.wait_for(lambda r: r["kind"] == "nvml_event")
        assert dbe["event_type"] == "double_bit_ecc" and dbe["gpu_uuid"] == GPU1 and dbe["gpu_instance_id"] is None
        rec = probe.wait_for(lambda r: r["kind"] == "nvml_event")
        assert rec["event_type"] == "recovery_action" and rec["event_data"] == 2

        # GPU 1 falls off the bus, then disappears from the device list.
        write_config(config, BASE.replace("bus=00000000:5E:00.0", "bus=00000000:5E:00.0 lost=1"))
        lost = probe.wait_for(lambda r: r["kind"] == "gpu_missing")
        assert lost["reason"] == "gpu_lost" and lost["gpu_uuid"] == GPU1 and lost["pci_bus_id"] == "00000000:5E:00.0"
        write_config(config, "\n".join(ln for ln in BASE.splitlines() if GPU1 not in ln and "proc" not in ln) + "\n")
        dropped = probe.wait_for(lambda r: r["kind"] == "gpu_missing")
        assert dropped["reason"] == "count_dropped" and (dropped["expected_count"], dropped["observed_count"]) == (2, 1)
    finally:
        metrics = probe.stop()
    assert metrics["xidpipe_agent_nvml_events_total"] == 3
    assert metrics["xidpipe_agent_nvml_available"] == 1


def test_a_hanging_call_times_out_and_the_rest_of_the_inventory_is_read(
    fake_nvml_lib: Path, tmp_path: Path, proc_root: Path
) -> None:
    config = tmp_path / "nvml.conf"
    write_config(config, BASE + "hang func=nvmlDeviceGetPowerManagementLimit ms=20000\n")
    probe = Probe(fake_nvml_lib, config, proc_root)
    began = time.monotonic()
    try:
        inv = probe.wait_for(lambda r: r["kind"] == "inventory")
        assert time.monotonic() - began < 10
        g0 = inv["gpus"][0]
        assert g0["power_limit_mw"] is None and "power_limit" in g0["unsupported"]
        assert g0["enforced_power_limit_mw"] == 700000
    finally:
        metrics = probe.stop()
    assert metrics["xidpipe_agent_nvml_call_timeouts_total"] >= 1
