"""Fixtures for GPU quarantine on the test cluster with the scheduler and the controllers
(tests/cluster.py): KWOK GPU nodes whose ResourceSlices are shaped like NVIDIA's DRA driver's, and
executors acting as the responder's RBAC identity (the chart's rbac.yaml)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.cordon import CordonRequest
from models.cordon_policy import CordonPolicy, Match, Rule
from models.quarantine import LABEL_MANAGED_BY
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.retry import Backoff
from respond.quarantine.kube_cluster import KubeCluster
from tests.cluster import publish_gpu_slice
from tests.kube import unique

# Xid 48 (double-bit ECC) quarantines the GPU; everything else is the documented default.
QUARANTINE_48 = Rule(name="dbe-quarantine", match=Match(xids=(48,)), action="quarantine_gpu")


def quarantine_policy(effect: str | None = None, **kw: Any) -> CordonPolicy:
    rule = QUARANTINE_48.model_copy(update={"effect": effect}) if effect else QUARANTINE_48
    return CordonPolicy(rules=(rule, *CordonPolicy().rules), **kw)


def xid48(node: str, gpu: str, incident: str | None = None, **kw: Any) -> CordonRequest:
    now = datetime.now(UTC)
    fields: dict[str, Any] = {
        "node": node, "incident_id": incident or f"v2:{unique('x')[-16:]}@20261129T120000.000000Z",
        "fingerprint": "v2:0123456789abcdef", "gpu": gpu, "family": "memory", "xids": (48,),
        "category": "hardware", "immediate_actions": ("WORKFLOW_XID_48",), "count": 1, "first_seen": now,
        "last_seen": now, "reason": "double-bit ECC error",
    }
    fields.update(kw)
    return CordonRequest(**fields)


@dataclass(frozen=True)
class GpuNode:
    name: str
    uuids: list[str]  # the GPU of device gpu-<i> is uuids[i]


@pytest.fixture
def gpu_node(kwok_node: Callable[..., Any], cluster_admin_client: client.ApiClient) -> Callable[..., GpuNode]:
    """``make(pool=None, slices=True) -> GpuNode``: a KWOK node with 8 GPUs, in a pool of its own unless
    given, with its ResourceSlice as NVIDIA's DRA driver publishes it (none with ``slices=False``:
    the classic device plugin)."""

    def make(pool: str | None = None, slices: bool = True) -> GpuNode:
        node = kwok_node(labels={"xidpipe.io/pool": pool or unique("pool")}).metadata.name
        if not slices:
            return GpuNode(node, [])
        made = publish_gpu_slice(cluster_admin_client, node)
        return GpuNode(node, [d["attributes"]["uuid"]["string"] for d in made["spec"]["devices"]])

    return make


@pytest.fixture
def resource(cluster_admin_client: client.ApiClient) -> Iterator[client.ResourceV1Api]:
    """The admin's ResourceV1Api; xidpipe's DeviceTaintRules are deleted after the test."""
    api = client.ResourceV1Api(cluster_admin_client)
    yield api
    for rule in api.list_device_taint_rule(label_selector=f"{LABEL_MANAGED_BY}=xidpipe").items:
        try:
            api.delete_device_taint_rule(rule.metadata.name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def action_log(tmp_path: Path) -> Path:
    return tmp_path / "actions.jsonl"


@pytest.fixture
def quarantine_executor(cluster_worker_client: client.ApiClient, action_log: Path,
                        resource: client.ResourceV1Api) -> Iterator[Callable[..., CordonExecutor]]:
    """``make(policy=None, **kw) -> CordonExecutor``: the responder's executor (KubeCluster) acting as
    the worker identity with the chart's RBAC, recording to a JSON Lines log."""
    made: list[KubeCluster] = []

    def make(policy: CordonPolicy | None = None, **kw: Any) -> CordonExecutor:
        kube = KubeCluster(cluster_worker_client, reporting_instance="xidpipe-test", backoff=Backoff(deadline_s=10.0))
        made.append(kube)
        return CordonExecutor(policy or quarantine_policy(), JsonlActionStore(kw.pop("log", action_log)), kube, **kw)

    yield make
    for kube in made:
        kube.close()


def history_db(path: Path, node: str, faulty: list[int]) -> str:
    """A SQLite history the stream's store wrote: the node's inventory of 8 GPUs (UUIDs as
    `tests.streams.records.uuid`) and an Xid 48 on each GPU index of `faulty`, one incident each;
    the GPU ledger rebuilt from it. Returns its URL."""
    from models.stream_policy import PipelinePolicy
    from streams.store import Store
    from tests.history.test_lifecycle_and_gpus import feed
    from tests.streams.records import T0, Kmsg, inventory, s
    from xidpipe.cli import main

    url = f"sqlite:///{path}"
    store = Store(url, PipelinePolicy())
    store.create_schema()
    kmsg = Kmsg(node)
    feed(store, [inventory(node, T0, gpus=8),
                 *(kmsg.xid(i, 48, T0 + s(10 + i), text="DBE (double bit error)") for i in faulty)])
    store.dispose()
    assert main(["gpus", "rebuild", "--database-url", url]) == 0
    return url
