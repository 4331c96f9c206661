"""The responder's watch of the cluster's GPU nodes: each node's `nvidia.com/gpu` capacity, allocatable
and expected count, and the NVIDIA device plugin's pod on it, as `KubeGpuView` records on the kube
topic; the stream decides (`models.signals.kube_gpus`) and groups them with the node's other reports.

Two list+watch loops (the informer pattern, as `respond.cordon.node_cache`): the nodes, and the pods of
the device plugin's namespace that match its selector (only when a namespace is configured; the
chart grants list/watch on pods there alone). Raw JSON, bookmarks, resumed after a timeout or a
dropped connection, listed again on 410 Gone. A node's view is published when it changes and, while
it is wrong, again at every recheck for a while (`models.signals.kube_gpus.tracker`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines

from models.signals.kube_gpus.records import KubeGpuView
from models.signals.kube_gpus.tracker import KubeViewTracker
from respond.gpu_watch.view import is_gpu_node, node_fields, pod_fields

log = logging.getLogger(__name__)

GONE = 410


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class ListWatch:
    """One resource's list+watch, handing every object (or its deletion) to `apply(kind, raw)`."""

    def __init__(self, name: str, list_fn: Callable[..., Any], apply: Callable[[str, dict[str, Any]], None],
                 stopped: threading.Event, *, page_size: int = 500, watch_timeout_s: int = 240,
                 retry_s: float = 1.0) -> None:
        self.name = name
        self.list_fn = list_fn
        self.apply = apply
        self.stopped = stopped
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.retry_s = retry_s
        self.synced = threading.Event()
        self._response: Any = None

    def run(self) -> None:
        version = ""
        while not self.stopped.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._watch(version)
            except Gone:
                version = ""
            except Exception as exc:
                if self.stopped.is_set():
                    return
                log.warning("GPU watch of %s: %s; retrying in %.1f s", self.name, exc, self.retry_s)
                self.stopped.wait(self.retry_s)

    def interrupt(self) -> None:
        sock = getattr(getattr(self._response, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _relist(self) -> str:
        token: str | None = None
        version = ""
        seen: list[dict[str, Any]] = []
        while True:
            kwargs: dict[str, Any] = {"limit": self.page_size, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            page = json.loads(self.list_fn(**kwargs).data)
            seen.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                break
        self.apply("LISTED", {"items": seen})
        self.synced.set()
        return version

    def _watch(self, version: str) -> str:
        response: Any = self.list_fn(watch=True, resource_version=version, allow_watch_bookmarks=True,
                                     timeout_seconds=self.watch_timeout_s, _preload_content=False,
                                     _request_timeout=(10, self.watch_timeout_s + 30))
        self._response = response
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if self.stopped.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, raw = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if raw.get("code") == GONE:
                        raise Gone(raw.get("message", ""))
                    raise RuntimeError(f"watch error {raw.get('code')}: {raw.get('message')}")
                version = str((raw.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self.apply(kind, raw)
        finally:
            self._response = None
            response.close()
            response.release_conn()
        return version


class GpuWatch:
    """The GPU nodes and the device plugin's pods; `publish` gets each view the tracker says is due."""

    def __init__(self, core: client.CoreV1Api, publish: Callable[[KubeGpuView], None], *, count_label: str,
                 plugin_namespace: str | None, plugin_selector: str, recheck_s: float = 30.0,
                 heartbeat_s: float = 600.0) -> None:
        self.publish = publish
        self.count_label = count_label
        self.recheck_s = recheck_s
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._nodes: dict[str, dict[str, Any]] = {}
        self._pods: dict[str, dict[str, Any]] = {}  # by namespace/name
        self._tracker = KubeViewTracker(heartbeat_s)
        self.watches = [ListWatch("nodes", core.list_node, self._on_node, self._stopped)]
        if plugin_namespace:
            def pods(**kwargs: Any) -> Any:
                return core.list_namespaced_pod(plugin_namespace, label_selector=plugin_selector, **kwargs)

            self.watches.append(ListWatch(f"pods of {plugin_namespace} ({plugin_selector})", pods, self._on_pod,
                                          self._stopped))
        self._threads: list[threading.Thread] = []

    def start(self) -> GpuWatch:
        for w in self.watches:
            self._spawn(w.name, w.run)
        self._spawn("recheck", self._recheck)
        return self

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        t = threading.Thread(target=target, name=f"gpu-watch:{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stopped.set()
        for w in self.watches:
            w.interrupt()
        for t in self._threads:
            t.join(timeout=2.0)

    def synced(self, timeout_s: float) -> bool:
        return all(w.synced.wait(timeout_s) for w in self.watches)

    # --- cache ------------------------------------------------------------------------------------
    def _on_node(self, kind: str, raw: dict[str, Any]) -> None:
        with self._lock:
            if kind == "LISTED":
                self._nodes = {(n.get("metadata") or {}).get("name", ""): n for n in raw["items"]}
                names = list(self._nodes)
            else:
                name = (raw.get("metadata") or {}).get("name", "")
                if kind == "DELETED":
                    self._nodes.pop(name, None)
                    self._tracker.forget(name)
                    return
                self._nodes[name] = raw
                names = [name]
            for name in names:
                self._evaluate(name)

    def _on_pod(self, kind: str, raw: dict[str, Any]) -> None:
        with self._lock:
            before = {n for p in self._pods.values() if (n := _node_of(p))}
            if kind == "LISTED":
                self._pods = {_key(p): p for p in raw["items"]}
            elif kind == "DELETED":
                self._pods.pop(_key(raw), None)
            else:
                self._pods[_key(raw)] = raw
            for name in sorted(before | {n for p in self._pods.values() if (n := _node_of(p))}):
                self._evaluate(name)

    def _recheck(self) -> None:
        while not self._stopped.wait(self.recheck_s):
            with self._lock:
                for name in self._tracker.wrong_nodes():
                    self._evaluate(name)

    def _evaluate(self, name: str) -> None:
        """Observe one node's view (the lock held) and publish it when due."""
        node = self._nodes.get(name)
        if node is None or not is_gpu_node(node, self.count_label):
            self._tracker.forget(name)
            return
        pods = [p for p in self._pods.values() if _node_of(p) == name and not _deleting(p)]
        fields = {**node_fields(node, self.count_label), **pod_fields(pods[0] if pods else None)}
        view = self._tracker.observe(name, fields, datetime.now(UTC))
        if view is not None:
            log.info("GPU view of node %s: %s/%s allocatable, plugin %s", name, view.allocatable, view.capacity,
                     "ready" if view.plugin_ready else view.plugin_waiting or view.plugin_ready,
                     extra={"node": name})
            self.publish(view)


def _key(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _node_of(pod: dict[str, Any]) -> str | None:
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def _deleting(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def build_gpu_watch(api: Any, publish: Callable[[KubeGpuView], None], settings: Any) -> GpuWatch:
    """The watch over the cluster of `api` (a kubernetes ApiClient), from the responder's settings."""
    return GpuWatch(client.CoreV1Api(api), publish, count_label=settings.gpu_count_label,
                    plugin_namespace=settings.device_plugin_namespace, plugin_selector=settings.device_plugin_selector,
                    recheck_s=settings.gpu_watch_recheck_s, heartbeat_s=settings.gpu_watch_heartbeat_s)
