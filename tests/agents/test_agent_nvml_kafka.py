"""The whole agent with the fake NVML and a real broker: NVML calls that hang never hold up the
kernel path, NVML events and evidence reach their topics, and without NVML the agent still runs."""

from __future__ import annotations

import base64
import ctypes.util
import gzip
import logging
import os
import time
from pathlib import Path

import pytest

from agents.main import build_agent
from agents.runtime import Agent
from agents.settings import AgentSettings
from models.node_records import EVIDENCE_TOPIC, KERNEL_TOPIC, NVML_TOPIC, STATE_TOPIC
from tests.agents.agent_process import AgentProcess
from tests.agents.conftest import consume
from tests.agents.kmsg_records import XID79, boot_stream, record
from tests.agents.test_nvml import BASE, GPU0, GPU1, write_config

pytestmark = pytest.mark.kafka


def _unpack(item: dict[str, object]) -> str:
    return gzip.decompress(base64.b64decode(str(item["data"]))).decode()


def test_kernel_path_flows_while_nvml_hangs_and_faults_bring_evidence(
    fake_nvml_lib: Path, tmp_path: Path, kafka_bootstrap: str, unique_node: str
) -> None:
    config = tmp_path / "nvml.conf"
    write_config(config, BASE + "hang func=nvmlDeviceGetComputeRunningProcesses_v3 ms=60000\n"
                             "hang func=nvmlDeviceGetPowerManagementLimit ms=60000\n")
    proc = tmp_path / "proc"
    (proc / "1234").mkdir(parents=True)
    (proc / "1234" / "cgroup").write_text("0::/kubepods/besteffort/pod1f2e3d4c-5b6a-4978-8695-a4b3c2d1e0f9/"
                                          + "ab" * 32 + "\n")
    (proc / "1234" / "cmdline").write_bytes(b"python3\0train.py\0--api-token=abc123secret\0--password\0hunter2\0")
    (proc / "1234" / "environ").write_bytes(b"AWS_SECRET_ACCESS_KEY=never-read\0")
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(b"")
    boot = tmp_path / "boot_id"
    boot.write_text("77777777-0c51-4d7e-9a53-0d8a1f0e2b11\n")
    env = {"LD_LIBRARY_PATH": str(fake_nvml_lib), "XIDPIPE_FAKE_NVML_CONFIG": str(config),
           "XIDPIPE_AGENT_NVML_CALL_TIMEOUT_S": "0.5", "XIDPIPE_AGENT_PROCESSES_INTERVAL_S": "0.2",
           "XIDPIPE_AGENT_INVENTORY_CHECK_S": "0.5", "XIDPIPE_AGENT_NVML_EVENT_WAIT_MS": "100",
           "XIDPIPE_AGENT_NVIDIA_SMI": "nvidia-smi-absent-here"}
    agent = AgentProcess(
        ["--source", "kmsg", "--kmsg-path", str(kmsg), "--boot-id-path", str(boot), "--node", unique_node,
         "--bootstrap-servers", kafka_bootstrap, "--state-dir", str(tmp_path / "state"), "--nvml",
         "--no-podresources", "--proc-root", str(proc)],
        tmp_path / "agent.log", env=env,
    ).start()

    def mine(records: list[dict[str, object]]) -> list[dict[str, object]]:
        return [r for r in records if r.get("node") == unique_node]

    try:
        # The NVML worker is stuck in two calls by now; the kernel path must not notice.
        agent.wait_metric("xidpipe_agent_nvml_call_timeouts_total", lambda v: v >= 2, timeout_s=20)
        began = time.monotonic()
        with open(kmsg, "ab") as fh:
            fh.write(boot_stream(range(0, 100)))
        lines = mine(consume(kafka_bootstrap, KERNEL_TOPIC, until=lambda r: len(mine(r)) >= 10, timeout_s=20))
        assert len(lines) == 10
        assert time.monotonic() - began < 10

        inventory = mine(consume(kafka_bootstrap, STATE_TOPIC, until=lambda r: bool(mine(r)), timeout_s=20))
        assert inventory[0]["kind"] == "inventory"

        # A fault line with a pid, then an NVML Xid event on the other GPU.
        with open(kmsg, "ab") as fh:
            fh.write(record(100, XID79, cont={"SUBSYSTEM": "pci"}))
        write_config(config, config.read_text() + "event id=1 gpu=1 type=8 data=79\n")
        def events_of(records: list[dict[str, object]]) -> list[dict[str, object]]:
            return [r for r in mine(records) if r["kind"] == "nvml_event"]  # the health poller writes there too

        events = events_of(consume(kafka_bootstrap, NVML_TOPIC, until=lambda r: bool(events_of(r)), timeout_s=20))
        assert events[0]["event_type"] == "xid_critical" and events[0]["gpu_uuid"] == GPU1

        evidence = mine(consume(kafka_bootstrap, EVIDENCE_TOPIC, until=lambda r: len(mine(r)) >= 2, timeout_s=30))
        by_bus = {e["pci_bus_id"]: e for e in evidence}
        kernel_ev = by_bus["0000:3b:00.0"]
        assert kernel_ev["gpu_uuid"] == GPU0 and kernel_ev["xid"] == 79 and kernel_ev["pid"] == 1234
        items = {i["name"]: i for i in kernel_ev["items"]}
        assert items["nvidia-smi-q"]["status"] == "absent"
        cmdline = _unpack(items["process-cmdline"])
        assert "abc123secret" not in cmdline and "hunter2" not in cmdline and "train.py" in cmdline
        assert "ab" * 32 in _unpack(items["process-cgroup"])
        assert XID79 in _unpack(items["kernel-log"])
        assert all("never-read" not in _unpack(i) for i in kernel_ev["items"])
        assert by_bus["0000:5e:00.0"]["gpu_uuid"] == GPU1
        assert agent.stop() == 0
    finally:
        agent.kill()


def test_without_nvml_the_kernel_path_runs_and_says_so_once(
    tmp_path: Path, kafka_bootstrap: str, unique_node: str, caplog: pytest.LogCaptureFixture
) -> None:
    if ctypes.util.find_library("nvidia-ml") or os.environ.get("LD_LIBRARY_PATH"):
        pytest.skip("an NVML library is reachable here")
    log = tmp_path / "kern.log"
    log.write_text("kernel: " + XID79 + "\n")
    settings = AgentSettings(node=unique_node, bootstrap_servers=kafka_bootstrap, state_dir=tmp_path / "s",
                             source="file", log_file=log, follow=False, nvml_enabled=True,
                             podresources_enabled=False, evidence_enabled=False, metrics_port=None)
    caplog.set_level(logging.INFO)
    agent: Agent = build_agent(settings)
    assert agent.run() == 0
    notes = [r for r in caplog.records if "NVML" in r.getMessage() and "off" in r.getMessage()]
    assert len(notes) == 1
    got = consume(kafka_bootstrap, KERNEL_TOPIC, until=lambda r: any(x.get("node") == unique_node for x in r))
    assert any(x.get("node") == unique_node for x in got)
