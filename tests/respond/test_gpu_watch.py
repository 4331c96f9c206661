"""The cluster's side of GPUs that vanish, on the real kube-apiserver: the responder's watch (with the
responder's own identity and the chart's RBAC) sees a GPU node's allocatable drop and its device plugin
crash-loop, publishes the node's views, and the stream makes one node fault of them."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.signals.kube_gpus.records import KubeGpuView
from models.stream_policy import HealthPolicy, PipelinePolicy
from respond.gpu_watch.watch import GpuWatch
from streams.items import ItemMapper
from streams.store import Store
from tests.kube import apply_rbac, chart_rbac, status_of, unique

SELECTOR = "app=nvidia-device-plugin-daemonset"


@pytest.fixture
def plugin_namespace(admin_client: client.ApiClient, admin_core: client.CoreV1Api, rbac_applied: object) -> str:
    """A device plugin namespace, and the chart's Role for the watch in it (rendered with that namespace)."""
    name = unique("gpu-operator")
    admin_core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    admin_core.create_namespaced_service_account(name, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="default")))
    docs = chart_rbac(f"respond.gpuWatch.devicePluginNamespace={name}")
    apply_rbac(admin_client, [d for d in docs if (d.get("metadata") or {}).get("namespace") == name])
    return name


@pytest.fixture
def views(worker_core: client.CoreV1Api, plugin_namespace: str) -> Iterator[queue.SimpleQueue[KubeGpuView]]:
    got: queue.SimpleQueue[KubeGpuView] = queue.SimpleQueue()
    watch = GpuWatch(worker_core, got.put, count_label="nvidia.com/gpu.count", plugin_namespace=plugin_namespace,
                     plugin_selector=SELECTOR, recheck_s=0.3)
    watch.start()
    assert watch.synced(30), "the watch did not list nodes and pods"
    yield got
    watch.stop()


def next_view(views: queue.SimpleQueue[KubeGpuView], node: str, ok: Any, timeout_s: float = 20) -> KubeGpuView:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            view = views.get(timeout=0.2)
        except queue.Empty:
            continue
        if view.node == node and ok(view):
            return view
    raise AssertionError(f"no such view of {node}")


def gpu_status(capacity: int, allocatable: int) -> dict[str, Any]:
    return {"status": {"capacity": {"nvidia.com/gpu": str(capacity), "cpu": "64"},
                       "allocatable": {"nvidia.com/gpu": str(allocatable), "cpu": "63"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def test_a_nodes_allocatable_drop_and_its_crash_looping_device_plugin_are_one_node_fault(
        admin_core: client.CoreV1Api, node: client.V1Node, plugin_namespace: str,
        views: queue.SimpleQueue[KubeGpuView], tmp_path: Any) -> None:
    name = node.metadata.name
    admin_core.patch_node(name, {"metadata": {"labels": {"nvidia.com/gpu.count": "8"}}})
    admin_core.patch_node_status(name, gpu_status(8, 8))
    pod = admin_core.create_namespaced_pod(plugin_namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=unique("nvidia-device-plugin"),
                                     labels={"app": "nvidia-device-plugin-daemonset"}),
        spec=client.V1PodSpec(node_name=name, automount_service_account_token=False, containers=[
            client.V1Container(name="plugin", image="nvcr.io/nvidia/k8s-device-plugin")])))
    ready = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
             "containerStatuses": [{"name": "plugin", "ready": True, "restartCount": 0, "image": "x", "imageID": "",
                                    "state": {"running": {}}}]}
    admin_core.patch_namespaced_pod_status(pod.metadata.name, plugin_namespace, {"status": ready})

    admin_core.patch_node_status(name, gpu_status(8, 0))  # the plugin marked every device unhealthy
    dropped = next_view(views, name, lambda v: v.allocatable == 0)
    assert (dropped.capacity, dropped.expected, dropped.plugin_ready) == (8, 8, True)
    again = next_view(views, name, lambda v: v.allocatable == 0)  # republished while it is wrong
    assert again.since["allocatable"] == dropped.since["allocatable"] and again.observed_at > dropped.observed_at

    looping = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
               "containerStatuses": [{"name": "plugin", "ready": False, "restartCount": 5, "image": "x",
                                      "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
    admin_core.patch_namespaced_pod_status(pod.metadata.name, plugin_namespace, {"status": looping})
    crashing = next_view(views, name, lambda v: v.plugin_waiting == "CrashLoopBackOff")
    assert (crashing.plugin_restarts, crashing.plugin_pod) == (5, f"{plugin_namespace}/{pod.metadata.name}")

    store = Store(f"sqlite:///{tmp_path / 'k.db'}", PipelinePolicy(update_interval_s=0, health=HealthPolicy(
        allocatable_grace_s=0)))
    store.create_schema()
    try:
        mapper = ItemMapper(policy=store.policy)
        items = [i for v in (dropped, again, crashing) for i in mapper.items(v, "xidpipe.node.kube")]
        result = store.process(items)
    finally:
        store.dispose()
    incidents = {o.payload["incident"]["incident_id"]: o.payload["incident"] for o in result.outgoing
                 if o.stream == "incidents"}
    [incident] = incidents.values()
    assert (incident["node"], incident["component"], incident["count"]) == (name, "node", 1)
    assert incident["codes"] == ["gpu_allocatable", "device_plugin"]


def test_a_healthy_gpu_node_and_a_node_without_gpus_are_not_published(
        admin_core: client.CoreV1Api, node: client.V1Node, views: queue.SimpleQueue[KubeGpuView]) -> None:
    plain = unique("cpu-node")
    admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=plain)))
    try:
        admin_core.patch_node_status(plain, {"status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}})
        admin_core.patch_node_status(node.metadata.name, gpu_status(4, 4))
        time.sleep(1.5)  # several rechecks: nothing is due for either node
        seen = []
        while not views.empty():
            seen.append(views.get().node)
        assert plain not in seen and node.metadata.name not in seen
    finally:
        admin_core.delete_node(plain)


def test_the_responder_may_watch_pods_only_in_the_device_plugins_namespace(
        worker_core: client.CoreV1Api, plugin_namespace: str, namespace: str) -> None:
    def watch(ns: str) -> int:
        def call() -> None:
            resp = worker_core.list_namespaced_pod(ns, watch=True, timeout_seconds=1, _preload_content=False)
            resp.close()

        return status_of(call)

    assert watch(plugin_namespace) == 200
    assert watch(namespace) == 403
    with pytest.raises(ApiException) as refused:
        worker_core.create_namespaced_pod(plugin_namespace, client.V1Pod(metadata=client.V1ObjectMeta(name="x")))
    assert refused.value.status == 403


def test_the_acting_responder_publishes_the_views_on_the_kube_topic(
        admin_core: client.CoreV1Api, node: client.V1Node, worker_client: client.ApiClient, kafka_bootstrap: str,
        postgres_database: str, tmp_path: Any) -> None:
    import asyncio
    import json
    import uuid

    from kafka import KafkaConsumer

    from models.topics import topology
    from respond.cordon.runtime import build_executor
    from respond.responder import build_responder, run_responder
    from respond.settings import RespondSettings
    from respond.sinks.build import build_sinks
    from respond.sinks.settings import SinkSettings
    from streams.settings import WorkerSettings
    from streams.worker import prepare
    from tests.polling import poll

    prefix = f"t{uuid.uuid4().hex[:6]}."
    prepare(WorkerSettings(bootstrap_servers=kafka_bootstrap, database_url=postgres_database, topic_prefix=prefix,
                           partitions=1))
    settings = RespondSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, database_url=postgres_database,
                               group_id=f"g-{prefix}", gpu_watch_recheck_s=0.5, metrics_port=None)
    responder = build_responder(settings, build_executor(settings.actions, database_url=postgres_database),
                                build_sinks(SinkSettings(outbox_dir=tmp_path / "outbox"), postgres_database),
                                cluster_api=worker_client)
    name = node.metadata.name
    admin_core.patch_node_status(name, gpu_status(8, 8))
    topic = topology(prefix, 1).kube.name
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             group_id=None, consumer_timeout_ms=500)

    def dropped() -> tuple[dict[str, Any], bytes] | None:
        for m in consumer:
            body = json.loads(m.value)
            if body["node"] == name and body["allocatable"] == 7:
                return body, m.key
        return None

    async def run() -> tuple[dict[str, Any], bytes]:
        stop = asyncio.Event()
        task = asyncio.create_task(run_responder(settings, responder, stop))
        try:
            await asyncio.sleep(2)
            admin_core.patch_node_status(name, gpu_status(8, 7))
            return await asyncio.to_thread(poll, "the node's view on the kube topic", dropped, 30)
        finally:
            stop.set()
            await task

    try:
        view, key = asyncio.run(run())
    finally:
        consumer.close()
    assert key == name.encode() and view["kind"] == "kube_gpu_view" and view["capacity"] == 8
