"""500 GPUs quarantined at once respect the breaker (tests/cluster.py's control plane): a pool of 63
nodes with 8 GPUs each (ResourceSlices shaped like NVIDIA's DRA driver's), one Xid 48 incident per
GPU on 500 of them, handled by 16 threads of one executor as the responder's identity. The breaker
counts the pool's share in GPUs and in nodes: whichever limit binds, it trips exactly at it, once,
and no rule is written past it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.cordon_policy import Breaker
from models.quarantine import LABEL_MANAGED_BY
from respond.cordon.executor import CordonExecutor
from tests.cluster import publish_gpu_slice
from tests.kube import unique
from tests.respond.quarantine.conftest import quarantine_policy, xid48

pytestmark = pytest.mark.k8s
NODES, GPUS_PER_NODE, REQUESTS = 63, 8, 500


@pytest.fixture
def gpu_pool(cluster_core: client.CoreV1Api, cluster_admin_client: client.ApiClient) -> Iterator[tuple[str, dict]]:
    """(pool, {node: [GPU UUIDs]}): NODES nodes of one pool (plain nodes: nothing runs on them), each
    with its 8-GPU ResourceSlice; deleted afterwards with their slices."""
    pool, gpus = unique("pool"), {}
    resource = client.ResourceV1Api(cluster_admin_client)
    try:
        for _ in range(NODES):
            name = unique("gpu-node")
            cluster_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
                name=name, labels={"xidpipe.io/pool": pool, "nvidia.com/gpu.present": "true"})))
            made = publish_gpu_slice(cluster_admin_client, name, gpus=GPUS_PER_NODE)
            gpus[name] = [d["attributes"]["uuid"]["string"] for d in made["spec"]["devices"]]
        yield pool, gpus
    finally:
        for name in gpus:
            for item in resource.list_resource_slice(field_selector=f"spec.nodeName={name}").items:
                _quietly(lambda n=item.metadata.name: resource.delete_resource_slice(n))
            _quietly(lambda n=name: cluster_core.delete_node(n))


def _quietly(delete: Callable[[], object]) -> None:
    try:
        delete()
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.mark.parametrize(("breaker", "bound"), [
    # 10% of 504 GPUs is 50; the node share (at least 63 nodes) never binds: exactly 50 rules.
    (Breaker(max_pool_share=0.1, min_nodes=NODES, max_per_hour=10_000), "gpus"),
    # 10% of 63 nodes is 6 nodes, and 50 GPUs: the nodes bind, at the seventh node with a faulty GPU.
    (Breaker(max_pool_share=0.1, max_per_hour=10_000), "nodes"),
], ids=["gpu-share", "node-share"])
def test_500_gpus_quarantined_at_once_stop_at_the_breakers_limit(
        gpu_pool: tuple[str, dict[str, list[str]]], quarantine_executor: Callable[..., CordonExecutor],
        resource: client.ResourceV1Api, action_log: Path, breaker: Breaker, bound: str) -> None:
    _, gpus = gpu_pool
    every = [(node, uuid) for node, uuids in gpus.items() for uuid in uuids][:REQUESTS]
    executor = quarantine_executor(quarantine_policy(breaker=breaker))

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda g: executor.handle(xid48(g[0], g[1])), every))

    outcomes = Counter((r.outcome, r.decision) for r in results)
    rules = [r for r in resource.list_device_taint_rule(label_selector=f"{LABEL_MANAGED_BY}=xidpipe").items
             if r.spec.device_selector.pool in gpus]
    nodes_held = {r.spec.device_selector.pool for r in rules}
    done = outcomes[("done", "quarantine")]
    assert len(rules) == done, outcomes
    assert outcomes[("blocked", "trip_breaker")] == 1, outcomes
    assert outcomes[("skipped", "breaker_open")] == REQUESTS - done - 1, outcomes
    trips = [json.loads(line) for line in action_log.read_text().splitlines() if '"breaker_trip"' in line]
    assert len(trips) == 1
    if bound == "gpus":
        assert done == 50 and "50 of 504 GPUs quarantined by xidpipe" in trips[0]["reason"], trips[0]["reason"]
    else:
        assert len(nodes_held) == 6 and "6 of 63 nodes held by xidpipe" in trips[0]["reason"], trips[0]["reason"]
    assert executor.breaker_status().tripped
