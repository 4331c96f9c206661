"""Fixtures for the cluster-action tests: the real kube-apiserver of tests/kube.py, nodes
in pools of their own, and executors that act as the worker's RBAC identity."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.cordon import CordonRequest
from models.cordon_policy import CordonPolicy
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon.retry import Backoff
from tests.kube import unique

NodeFactory = Callable[..., str]
ExecutorFactory = Callable[..., CordonExecutor]


def xid79(node: str, incident: str | None = None, **kw: Any) -> CordonRequest:
    now = datetime.now(UTC)
    fields: dict[str, Any] = {
        "node": node, "incident_id": incident or unique("inc"), "fingerprint": "v1:0123456789abcdef",
        "gpu": "GPU-5d8c2a1e", "family": "gpu_lost", "xids": (79,), "category": "hardware",
        "immediate_actions": ("RESTART_BM",), "count": 1, "first_seen": now, "last_seen": now,
        "reason": "GPU fell off the bus",
    }
    fields.update(kw)
    return CordonRequest(**fields)


@pytest.fixture
def make_node(admin_core: client.CoreV1Api) -> Iterator[NodeFactory]:
    """Create GPU nodes as admin (with another owner's taint); all deleted after the test."""
    created: list[str] = []

    def factory(*, pool: str | None = None, labels: dict[str, str] | None = None, unschedulable: bool = False,
                name: str | None = None) -> str:
        node_name = name or unique("gpu-node")
        node_labels = {"nvidia.com/gpu.present": "true", **(labels or {})}
        if pool is not None:
            node_labels["xidpipe.io/pool"] = pool
        admin_core.create_node(client.V1Node(
            metadata=client.V1ObjectMeta(name=node_name, labels=node_labels),
            spec=client.V1NodeSpec(unschedulable=unschedulable or None,
                                   taints=[client.V1Taint(key="example.com/other-owner", effect="NoSchedule")]),
        ))
        created.append(node_name)
        return node_name

    yield factory
    for name in created:
        try:
            admin_core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def action_log(tmp_path: Path) -> Path:
    return tmp_path / "actions.jsonl"


@pytest.fixture
def make_executor(worker_client: client.ApiClient, action_log: Path) -> Iterator[ExecutorFactory]:
    """An executor acting as the worker identity (the chart's RBAC), recording to a JSON Lines log; the
    node caches' watches are stopped after the test."""
    made: list[KubeNodes] = []

    def factory(policy: CordonPolicy | None = None, *, nodes: KubeNodes | None = None,
                api_client: client.ApiClient | None = None, **kw: Any) -> CordonExecutor:
        kube = nodes or KubeNodes(api_client or worker_client, reporting_instance="xidpipe-test",
                                  backoff=Backoff(deadline_s=5.0))
        made.append(kube)
        return CordonExecutor(policy or CordonPolicy(), JsonlActionStore(action_log), kube, **kw)

    yield factory
    for kube in made:
        kube.close()
