"""The workloads sensor's Kubernetes adapter: the node's pods (a list, then a watch resumed from its
resourceVersion) and the owners of the objects the sensor must read. The only module of the agent
that imports `kubernetes` (an import-linter contract).

Pods and owners are read as the API server's JSON (`_preload_content=False`), never through the
client's models: what the sensor reads of them is `models.workloads.pod_facts`, and a pod the client's
models would refuse cannot stop the watch. A watch event of type ERROR with code 410 (the
resourceVersion is too old) raises `Expired`: the sensor lists again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from agents.signals.workloads.port import Expired
from models.workloads import OwnerRef, owner_refs

log = logging.getLogger(__name__)

_PAGE = 500  # pods per list page: a node runs at most a few hundred


class KubeError(Exception):
    """A call the API server refused or failed; `status` is its HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def api_client(kube_config: str) -> client.ApiClient:
    """The API client of `kube_config`: "in-cluster" (the pod's ServiceAccount token) or a kubeconfig path."""
    configuration = client.Configuration()
    if kube_config == "in-cluster":
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(config_file=kube_config, client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


class KubePods:
    """The pods of one node, and the owners above them, from the API server."""

    def __init__(self, node: str, kube_config: str, request_timeout_s: float = 30.0) -> None:
        self._api = api_client(kube_config)
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)
        self._selector = f"spec.nodeName={node}"
        self._timeout = request_timeout_s
        self._lock = threading.Lock()
        self._open: Any = None  # the watch response being read (close() shuts its socket)

    def list(self) -> tuple[list[dict[str, Any]], str]:
        """The node's pods (API JSON) and the list's resourceVersion (where a watch resumes)."""
        pods: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            body = self._json(self._core.list_pod_for_all_namespaces, field_selector=self._selector, limit=_PAGE,
                              _continue=token)
            pods.extend(p for p in body.get("items") or () if isinstance(p, dict))
            meta = body.get("metadata") or {}
            token = meta.get("continue") or None
            if token is None:
                return pods, str(meta.get("resourceVersion") or "")

    def watch(self, resource_version: str, timeout_s: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """The node's pod events after `resource_version` (ADDED, MODIFIED, DELETED, BOOKMARK), for at most
        `timeout_s` (the server ends the watch then). Raises `Expired` on 410."""
        resp = self._call(self._core.list_pod_for_all_namespaces, field_selector=self._selector,
                          resource_version=resource_version, allow_watch_bookmarks=True, timeout_seconds=timeout_s,
                          watch=True, _request_timeout=(self._timeout, timeout_s + self._timeout))
        try:
            self._check(resp)
        except KubeError:
            resp.release_conn()
            raise
        with self._lock:
            self._open = resp
        try:
            for line in _lines(resp):
                event = json.loads(line) if line.strip() else None
                if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
                    continue
                obj = event["object"]
                if event.get("type") == "ERROR":
                    code = int(obj.get("code") or 0)
                    if code == 410:
                        raise Expired(str(obj.get("message") or "resourceVersion too old"))
                    raise KubeError(code, f"watch error {code}: {obj.get('reason')}: {obj.get('message')}")
                yield str(event.get("type")), obj
        finally:
            with self._lock:
                self._open = None
            resp.close()
            resp.release_conn()

    def owners_of(self, ref: OwnerRef, namespace: str, plural: str) -> tuple[OwnerRef, ...] | None:
        """The owner references of the object `ref` names (of resource `plural` in its API group), or None
        when it is gone (404, or the name is another object's now)."""
        group, _, version = ref.api_version.rpartition("/")
        try:
            obj = self._json(self._custom.get_namespaced_custom_object, group, version, namespace, plural, ref.name)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        meta = obj.get("metadata") or {}
        if ref.uid and meta.get("uid") != ref.uid:
            return None
        return owner_refs(meta)

    def close(self) -> None:
        """End a watch being read (from another thread): its socket is shut, its read returns."""
        with self._lock:
            resp = self._open
        conn = getattr(resp, "connection", None) if resp is not None else None
        sock = getattr(conn, "sock", None) if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._api.close()  # type: ignore[no-untyped-call]

    def _json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        kwargs.setdefault("_request_timeout", self._timeout)
        resp = self._call(fn, *args, **kwargs)
        try:
            self._check(resp)
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        if not isinstance(body, dict):
            raise KubeError(0, "the API server answered with something other than an object")
        return body

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn` answering with the raw response (the API server's JSON, not the client's models)."""
        try:
            return fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise KubeError(int(exc.status or 0), f"{exc.status} {exc.reason}") from None

    @staticmethod
    def _check(resp: Any) -> None:
        status = int(getattr(resp, "status", 0) or 0)
        if not 200 <= status < 300:
            reason = getattr(resp, "reason", "") or ""
            raise KubeError(status, f"{status} {reason}".strip())


def _lines(resp: Any) -> Iterator[bytes]:
    """The lines of a streamed response (one watch event each), as they arrive."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from lines
    if pending:
        yield pending
