"""The kernel path end to end against a real broker: file and kmsg sources, cursors, restarts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.runtime import Agent
from agents.settings import AgentSettings
from models.node_records import KERNEL_TOPIC
from models.wire import decode_node_record
from tests.agents.conftest import consume
from tests.agents.kmsg_records import boot_stream

pytestmark = pytest.mark.kafka

XID = "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def _settings(tmp_path: Path, bootstrap: str, node: str, **kw: object) -> AgentSettings:
    base: dict[str, object] = dict(
        node=node, bootstrap_servers=bootstrap, state_dir=tmp_path / "state", follow=False,
        nvml_enabled=False, podresources_enabled=False, evidence_enabled=False, metrics_port=None,
    )
    base.update(kw)
    return AgentSettings(**base)  # type: ignore[arg-type]


def test_file_source_publishes_gpu_lines_once_across_restarts(
    tmp_path: Path, kafka_bootstrap: str, unique_node: str
) -> None:
    log = tmp_path / "kern.log"
    lines = [XID.replace("79", str(i)) if i % 20 == 0 else f"kernel: eth0: link flap {i}" for i in range(400)]
    log.write_text("".join(f"{line}\n" for line in lines))
    settings = _settings(tmp_path, kafka_bootstrap, unique_node, source="file", log_file=log)
    agent = Agent(settings)
    assert agent.run() == 0
    assert agent.metrics.get("xidpipe_agent_prefilter_kept_total") == 20
    assert agent.metrics.get("xidpipe_agent_prefilter_dropped_total") == 380

    def mine(records: list[dict[str, object]]) -> list[dict[str, object]]:
        return [r for r in records if r.get("node") == unique_node]

    got = mine(consume(kafka_bootstrap, KERNEL_TOPIC, until=lambda r: len(mine(r)) >= 20))
    assert len(got) == 20
    record = decode_node_record(json.dumps(got[0]))
    assert record.kind == "kernel_line" and record.source == "file" and record.fault  # type: ignore[union-attr]
    assert record.schema_version == 1 and record.file_offset == 0  # type: ignore[union-attr]
    cursor = json.loads((tmp_path / "state" / "cursor-file.json").read_text())
    assert cursor["offset"] == log.stat().st_size

    # More lines, a second run from the cursor: only the new GPU lines are published.
    with open(log, "a") as fh:
        fh.write(XID.replace("79", "31") + "\n" + "kernel: unrelated\n")
    assert Agent(settings).run() == 0
    got = mine(consume(kafka_bootstrap, KERNEL_TOPIC, until=lambda r: len(mine(r)) > 21, timeout_s=3))
    assert len(got) == 21
    assert len({r["record_id"] for r in got}) == 21


def test_kmsg_source_publishes_lines_and_gaps_keyed_by_node(
    tmp_path: Path, kafka_bootstrap: str, unique_node: str
) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("6f3b2a8e-0c51-4d7e-9a53-0d8a1f0e2b11\n")
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(boot_stream([*range(0, 100), *range(150, 200)]))
    settings = _settings(tmp_path, kafka_bootstrap, unique_node, source="kmsg", kmsg_path=kmsg, boot_id_path=boot)
    assert Agent(settings).run() == 0

    def mine(records: list[dict[str, object]]) -> list[dict[str, object]]:
        return [r for r in records if r.get("node") == unique_node]

    got = mine(consume(kafka_bootstrap, KERNEL_TOPIC, until=lambda r: len(mine(r)) >= 16))
    lines = [r for r in got if r["kind"] == "kernel_line"]
    gaps = [r for r in got if r["kind"] == "kernel_gap"]
    assert sorted(r["seq"] for r in lines) == [s for s in [*range(0, 100), *range(150, 200)] if s % 10 == 5]
    assert len(gaps) == 1 and gaps[0]["lost"] == 50 and gaps[0]["after_seq"] == 99
    assert all(r["boot_id"] == "6f3b2a8e-0c51-4d7e-9a53-0d8a1f0e2b11" for r in lines)
    assert lines[0]["continuation"] == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:3b:00.0"}
