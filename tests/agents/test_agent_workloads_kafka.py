"""The agent, with its workloads sensor on, publishes its node's GPU pods' workloads, read on a real
kube-apiserver as the agent's ServiceAccount, to the state topic, and again when they change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agents.main import build_agent
from agents.settings import AgentSettings
from models.node_records import STATE_TOPIC
from tests.agents.conftest import consume
from tests.agents.test_workloads_kube import agent_kubeconfig, gpu_pod

pytestmark = pytest.mark.kafka
__all__ = ["agent_kubeconfig"]  # the fixture, used below


def test_pod_workloads_reach_the_state_topic(tmp_path: Path, kafka_bootstrap: str, node: client.V1Node,
                                             admin_client: client.ApiClient, agent_kubeconfig: Path,
                                             namespace: str) -> None:
    core = client.CoreV1Api(admin_client)
    unique_node = node.metadata.name
    core.create_namespaced_pod(namespace, gpu_pod(namespace, unique_node, "jobset"))
    log = tmp_path / "kern.log"
    log.write_text("")
    settings = AgentSettings(
        node=unique_node, bootstrap_servers=kafka_bootstrap, state_dir=tmp_path / "s", source="file", log_file=log,
        nvml_enabled=False, podresources_enabled=False, evidence_enabled=False, metrics_port=None,
        workloads_enabled=True, workloads_kube_config=str(agent_kubeconfig),
    )
    agent = build_agent(settings)
    agent.start()
    try:
        def mine(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [r for r in records if r.get("node") == unique_node and r["kind"] == "pod_workloads"]

        first = mine(consume(kafka_bootstrap, STATE_TOPIC, until=lambda r: bool(mine(r))))
        [pod] = first[0]["pods"]
        assert (pod["pod"], pod["workload"]["kind"], pod["workload"]["name"]) == (
            "trainer-workers-0-23-k9d2x", "JobSet", "trainer")
        core.create_namespaced_pod(namespace, gpu_pod(namespace, unique_node, "pytorchjob"))
        both = mine(consume(kafka_bootstrap, STATE_TOPIC, until=lambda r: len(mine(r)) >= 2))
        assert sorted(p["workload"]["kind"] for p in both[-1]["pods"]) == ["JobSet", "PyTorchJob"]
    finally:
        agent.stop_event.set()
        agent.stop()
