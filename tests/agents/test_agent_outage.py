"""Kafka goes away and the agent is SIGKILLed: every GPU line still arrives, none twice."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

from models.node_records import KERNEL_TOPIC
from tests.agents.agent_process import AgentProcess
from tests.agents.conftest import consume
from tests.agents.kmsg_records import boot_stream
from tests.agents.restartable_kafka import start_broker

pytestmark = pytest.mark.kafka

BOOT = "d3adb33f-0c51-4d7e-9a53-0d8a1f0e2b11"


def _gpu_seqs(last: int) -> set[int]:
    return {s for s in range(last) if s % 10 == 5}


def test_broker_outage_and_agent_sigkill_lose_nothing_and_duplicate_nothing(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "kafka")
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(b"")
    boot = tmp_path / "boot_id"
    boot.write_text(BOOT + "\n")
    args = ["--source", "kmsg", "--kmsg-path", str(kmsg), "--boot-id-path", str(boot), "--node", "gpu-node-1",
            "--bootstrap-servers", broker.bootstrap, "--state-dir", str(tmp_path / "state"), "--no-nvml",
            "--no-podresources", "--no-evidence"]
    agent = AgentProcess(args, tmp_path / "agent.log").start()
    written = 0

    def write(n: int) -> None:
        nonlocal written
        with open(kmsg, "ab") as fh:
            fh.write(boot_stream(range(written, written + n)))
        written += n

    def check_kafka(bootstrap: str) -> None:
        want = _gpu_seqs(written)
        records = consume(
            bootstrap, KERNEL_TOPIC, timeout_s=90,
            until=lambda rs: {r["seq"] for r in rs if r["kind"] == "kernel_line"} >= want,
        )
        lines = [(r["boot_id"], r["seq"]) for r in records if r["kind"] == "kernel_line"]
        dupes = [k for k, n in collections.Counter(lines).items() if n > 1]
        assert not dupes, f"{len(dupes)} duplicated (boot id, seq), e.g. {dupes[:5]}"
        assert {s for b, s in lines if b == BOOT} == want
        assert not [r for r in records if r["kind"] == "kernel_gap"]

    try:
        write(1000)
        check_kafka(broker.bootstrap)

        # Kafka away: 10,000 lines are read and spooled meanwhile.
        broker.stop()
        write(10_000)
        agent.wait_metric("xidpipe_agent_kernel_lines_read_total", lambda v: v >= written)
        agent.wait_metric("xidpipe_agent_spool_pending", lambda v: v >= 1000)
        broker.restart()
        agent.wait_metric("xidpipe_agent_spool_pending", lambda v: v == 0, timeout_s=90)
        check_kafka(broker.bootstrap)

        # SIGKILL while records are in flight, then restart on the same state.
        write(5000)
        agent.wait_metric("xidpipe_agent_records_acked_total", lambda v: v > 1100 + 50)
        agent.kill()
        write(2000)
        agent = AgentProcess(args, tmp_path / "agent.log").start()
        agent.wait_metric("xidpipe_agent_kernel_lines_read_total", lambda v: v > 0)
        check_kafka(broker.bootstrap)
        assert agent.stop() == 0
    finally:
        agent.kill()
        broker.remove()
        if os.environ.get("KEEP_AGENT_LOG"):
            print((tmp_path / "agent.log").read_text()[-5000:])
