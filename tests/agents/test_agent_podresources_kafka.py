"""The agent publishes the kubelet's GPU assignments to the state topic, and again when they change."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agents.main import build_agent
from agents.settings import AgentSettings
from models.node_records import STATE_TOPIC
from tests.agents.conftest import consume
from tests.agents.test_podresources import GPU0, MIG
from tests.fakes.kubelet.server import FakeContainer, FakeKubelet, FakePod

pytestmark = pytest.mark.kafka


def test_pod_assignments_reach_the_state_topic(tmp_path: Path, kafka_bootstrap: str, unique_node: str) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    with FakeKubelet(tmp_path / "kubelet.sock") as kubelet:
        kubelet.set_pods([FakePod("trainer-0", "ml", [FakeContainer("main", {"nvidia.com/gpu": [GPU0]})])])
        settings = AgentSettings(
            node=unique_node, bootstrap_servers=kafka_bootstrap, state_dir=tmp_path / "s", source="file",
            log_file=log, nvml_enabled=False, evidence_enabled=False, metrics_port=None,
            podresources_socket=kubelet.socket_path, podresources_interval_s=0.1,
        )
        agent = build_agent(settings)
        agent.start()
        try:
            def mine(records: list[dict[str, object]]) -> list[dict[str, object]]:
                return [r for r in records if r.get("node") == unique_node and r["kind"] == "pod_assignments"]

            first = mine(consume(kafka_bootstrap, STATE_TOPIC, until=lambda r: bool(mine(r))))
            assert [(a["pod"], a["device_id"]) for a in first[0]["assignments"]] == [("trainer-0", GPU0)]
            time.sleep(0.3)  # several polls with nothing changed: still one record
            kubelet.set_pods([FakePod("nb", "research", [FakeContainer("j", {"nvidia.com/mig-1g.10gb": [MIG]})])])
            both = mine(consume(kafka_bootstrap, STATE_TOPIC, until=lambda r: len(mine(r)) >= 2))
            assert len(both) == 2 and both[1]["assignments"][0]["mig"] is True
        finally:
            agent.stop_event.set()
            agent.stop()
