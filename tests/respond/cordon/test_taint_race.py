"""Taints are written by read-modify-write guarded by metadata.resourceVersion: a writer holding a
stale node loses cleanly (422 or 409) and never overwrites another writer's taints. The writers
here are any controllers that taint nodes (the admin identity): xidpipe's worker itself may write
only its own taint (the chart's node-patch policy, tests/deploy/test_node_policy.py)."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kube import status_of


def taint(key: str) -> dict[str, Any]:
    return {"key": key, "value": "true", "effect": "NoSchedule"}


def guarded_taint_patch(resource_version: str, taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """JSON patch: apply only if the node is still at resource_version."""
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
        {"op": "add", "path": "/spec/taints", "value": taints},
    ]


def taint_keys(node: client.V1Node) -> list[str]:
    return [t.key for t in node.spec.taints or []]


def test_stale_json_patch_loses_with_422(
    admin_core: client.CoreV1Api, admin_client: client.ApiClient, node: client.V1Node
) -> None:
    name = node.metadata.name
    seen_by_a = admin_core.read_node(name)
    seen_by_b = admin_core.read_node(name)
    existing = admin_client.sanitize_for_serialization(seen_by_a.spec.taints)

    admin_core.patch_node(
        name,
        guarded_taint_patch(seen_by_a.metadata.resource_version, [*existing, taint("writer-a/gpu-fault")]),
    )
    status = status_of(
        lambda: admin_core.patch_node(
            name,
            guarded_taint_patch(seen_by_b.metadata.resource_version, [*existing, taint("writer-b/gpu-fault")]),
        )
    )

    assert status == 422
    assert taint_keys(admin_core.read_node(name)) == [*taint_keys(seen_by_a), "writer-a/gpu-fault"]


def test_stale_merge_patch_with_resource_version_loses_with_409(
    admin_core: client.CoreV1Api, admin_client: client.ApiClient, node: client.V1Node
) -> None:
    name = node.metadata.name
    seen_by_a = admin_core.read_node(name)
    seen_by_b = admin_core.read_node(name)
    existing = admin_client.sanitize_for_serialization(seen_by_a.spec.taints)

    def merge(seen: client.V1Node, key: str) -> object:
        body = {
            "metadata": {"resourceVersion": seen.metadata.resource_version},
            "spec": {"taints": [*existing, taint(key)]},
        }
        return admin_core.patch_node(name, body, _content_type="application/merge-patch+json")

    merge(seen_by_a, "writer-a/gpu-fault")
    status = status_of(lambda: merge(seen_by_b, "writer-b/gpu-fault"))

    assert status == 409
    assert taint_keys(admin_core.read_node(name)) == [*taint_keys(seen_by_a), "writer-a/gpu-fault"]


def test_concurrent_writers_that_retry_lose_no_taint(
    admin_core: client.CoreV1Api, admin_client: client.ApiClient, node: client.V1Node
) -> None:
    name = node.metadata.name
    writers = [f"writer-{i}/gpu-fault" for i in range(4)]
    # Taints other owners hold, among them node.kubernetes.io/not-ready added at creation by the
    # TaintNodesByCondition admission plugin.
    before = taint_keys(admin_core.read_node(name))
    conflicts: list[int] = []
    start = threading.Barrier(len(writers))

    def add_taint(key: str) -> None:
        start.wait()
        for _attempt in range(50):
            current = admin_core.read_node(name)
            taints = [*admin_client.sanitize_for_serialization(current.spec.taints or []), taint(key)]
            try:
                admin_core.patch_node(name, guarded_taint_patch(current.metadata.resource_version, taints))
                return
            except ApiException as exc:
                if exc.status not in (409, 422):
                    raise
                conflicts.append(exc.status)
        raise AssertionError(f"{key}: no successful write in 50 attempts")

    threads = [threading.Thread(target=add_taint, args=(key,)) for key in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted(taint_keys(admin_core.read_node(name))) == sorted([*before, *writers])
    assert set(conflicts) <= {422}
