"""Kubernetes adapter for node actions (synchronous `kubernetes` client; see executor for asyncio).

What it writes, and how:

- cordon, taint and annotations in ONE JSON patch that starts with a `test` of
  `metadata.resourceVersion`: a read-modify-write of `spec.taints` (which has no merge key) that
  keeps every other owner's taints, and an atomic claim of the cordon (the annotation that says
  xidpipe owns it is never written without the cordon, nor the cordon without it). A moved
  resourceVersion answers 422 (or 409); the caller re-reads, decides again, and retries.
- the `GPUHealthy` condition with a strategic-merge patch of `nodes/{name}/status` (conditions
  merge by type), as Node Problem Detector does.
- an events.k8s.io/v1 Event regarding the node, named after the node and the incident, so a
  redelivery finds it (409) instead of creating another; a repeat updates its `series`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.cordon import (
    ANN_CORDONED_AT,
    ANN_OCCURRENCES,
    ANN_RELEASE_REASON,
    ANN_RELEASED_AT,
    ANN_RELEASED_BY,
    ANN_RELEASED_INCIDENT,
    CONDITION_TYPE,
    CORDON_ANNOTATIONS,
    CordonDecision,
    CordonRequest,
    FleetView,
    NodeView,
    condition_message,
    condition_reason,
    cordon_annotations,
    pool_of,
    with_our_taint,
    without_our_taint,
)
from models.cordon_policy import CordonPolicy
from respond.cordon.retry import Backoff, PermanentError, call_with_retry

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "xidpipe.io/worker"
EVENT_NAMESPACE = "default"  # events about cluster-scoped objects (nodes) live in default
NOTE_MAX = 1024


class Conflict(Exception):
    """The node changed between read and write (resourceVersion moved): read again and retry."""


@dataclass(slots=True)
class NodeRead:
    view: NodeView
    node: client.V1Node | None
    resource_version: str | None = None
    taints: list[dict[str, Any]] = field(default_factory=list)


def _escape(key: str) -> str:
    """A JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def event_name(node: str, incident_id: str, kind: str = "cordon") -> str:
    """A stable Event name per (node, incident, kind), within the 253 characters an object name may have."""
    digest = hashlib.sha256(f"{incident_id}\x1f{kind}".encode()).hexdigest()[:12]
    suffix = f".xidpipe-{kind}.{digest}"
    return node[: 253 - len(suffix)].rstrip(".-") + suffix


class KubeNodes:
    """Node reads and writes, each retried on transient errors (429, 5xx, connection) within `backoff`."""

    def __init__(
        self, api_client: client.ApiClient, *, reporting_instance: str, backoff: Backoff | None = None
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.events = client.EventsV1Api(api_client)
        self.reporting_instance = reporting_instance[:128]
        self.backoff = backoff or Backoff()
        self._seen_rv = 0  # the newest node resourceVersion this client has read or written

    def _saw(self, node: client.V1Node | None) -> None:
        rv = node.metadata.resource_version if node is not None and node.metadata else None
        if rv and rv.isdigit():
            self._seen_rv = max(self._seen_rv, int(rv))

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return call_with_retry(lambda: fn(*args, **kwargs), what, self.backoff)

    # --- reads ------------------------------------------------------------------------------------

    def read(self, name: str) -> NodeRead:
        try:
            node = self._call(f"read node {name}", self.core.read_node, name)
        except PermanentError as exc:
            if exc.status == 404:
                return NodeRead(NodeView(name=name, exists=False), None)
            raise
        self._saw(node)
        meta, spec = node.metadata, node.spec
        taints: list[dict[str, Any]] = (
            list(self.api_client.sanitize_for_serialization(spec.taints or [])) if spec else []  # type: ignore[no-untyped-call]
        )
        view = NodeView(
            name=name, labels=dict(meta.labels or {}), annotations=dict(meta.annotations or {}),
            unschedulable=bool(spec and spec.unschedulable), taint_keys=tuple(t["key"] for t in taints),
        )
        return NodeRead(view, node, meta.resource_version, taints)

    def fleet_view(self, policy: CordonPolicy, labels: dict[str, str], cordons_last_hour: int) -> FleetView:
        """The node's pool: its size and how many of its nodes xidpipe holds cordoned now.

        Lists only the pool's nodes (label selector) and reads the raw JSON: deserialising every
        node into client models would cost more than the request itself on a large pool. The list
        is served from the API server's cache, but never older than the newest node version this
        client has read or written (`resourceVersionMatch=NotOlderThan`): every cordon it wrote is
        counted. A fully consistent list waits for the cache to confirm the latest etcd revision,
        which takes tens of milliseconds after writes to other resources (Events)."""
        pool = pool_of(policy, labels)
        key = policy.scope.pool_label
        selector = f"{key}={pool}" if pool else f"!{key}"
        freshness: dict[str, str] = {}
        if self._seen_rv:
            freshness = {"resource_version": str(self._seen_rv), "resource_version_match": "NotOlderThan"}
        response = self._call("list nodes", self.core.list_node, label_selector=selector, _preload_content=False,
                              **freshness)
        items = json.loads(response.data).get("items") or []
        cordoned = sum(
            1 for n in items
            if ANN_CORDONED_AT in ((n.get("metadata") or {}).get("annotations") or {})
            and (n.get("spec") or {}).get("unschedulable")
        )
        return FleetView(pool=pool, pool_nodes=len(items), pool_cordoned_by_xidpipe=cordoned,
                         cordons_last_hour=cordons_last_hour)

    # --- cordon -----------------------------------------------------------------------------------

    def _guarded_patch(self, current: NodeRead, ops: list[dict[str, Any]], what: str) -> client.V1Node:
        body = [{"op": "test", "path": "/metadata/resourceVersion", "value": current.resource_version}, *ops]
        try:
            patched: client.V1Node = self._call(what, self.core.patch_node, current.view.name, body)
            self._saw(patched)
            return patched
        except PermanentError as exc:
            if exc.status == 409:
                raise Conflict(str(exc)) from exc
            if exc.status == 422:
                # The `test` op fails with 422 when the resourceVersion moved; anything else is invalid.
                again = self.read(current.view.name)
                if again.resource_version != current.resource_version:
                    raise Conflict(str(exc)) from exc
            raise

    def apply_cordon(
        self, current: NodeRead, req: CordonRequest, decision: CordonDecision, at: datetime
    ) -> tuple[list[str], client.V1Node]:
        """Cordon, taint and claim the node in one guarded patch; returns what changed and the node."""
        assert current.node is not None
        ops: list[dict[str, Any]] = []
        changed: list[str] = []
        if not current.view.unschedulable:
            ops.append({"op": "add", "path": "/spec/unschedulable", "value": True})
            changed.append("unschedulable")
        taints = with_our_taint(current.taints, req.family)
        if taints is not None:
            ops.append({"op": "add", "path": "/spec/taints", "value": taints})
            changed.append("taint")
        annotations = cordon_annotations(req, decision, at)
        if current.node.metadata is None or current.node.metadata.annotations is None:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
        else:
            ops.extend({"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
                       for k, v in annotations.items())
        changed.append("annotations")
        return changed, self._guarded_patch(current, ops, f"cordon node {current.view.name}")

    def record_repeat(self, name: str, count: int) -> None:
        self._saw(self._call(f"annotate node {name}", self.core.patch_node, name,
                   {"metadata": {"annotations": {ANN_OCCURRENCES: str(count)}}},
                   _content_type="application/merge-patch+json"))

    def set_condition(self, name: str, status: str, reason: str, message: str, at: datetime,
                      node: client.V1Node | None) -> bool:
        """Set the GPUHealthy condition unless it already says the same; returns whether it changed."""
        existing = next((c for c in ((node.status.conditions or []) if node and node.status else [])
                         if c.type == CONDITION_TYPE), None)
        if existing is not None and (existing.status, existing.reason, existing.message) == (status, reason, message):
            return False
        stamp = at.replace(microsecond=0).isoformat()
        transition = stamp
        if existing is not None and existing.status == status and existing.last_transition_time is not None:
            transition = existing.last_transition_time.isoformat()
        condition = {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
                     "lastHeartbeatTime": stamp, "lastTransitionTime": transition}
        self._saw(self._call(f"set condition on {name}", self.core.patch_node_status, name,
                             {"status": {"conditions": [condition]}}))
        return True

    def gpu_unhealthy(self, name: str, req: CordonRequest, at: datetime, node: client.V1Node | None) -> bool:
        return self.set_condition(name, "False", condition_reason(req.family), condition_message(req), at, node)

    # --- events -----------------------------------------------------------------------------------

    def emit_event(self, name: str, *, key: str, kind: str, action: str, reason: str, note: str,
                   at: datetime, event_type: str = "Warning") -> str:
        """Create the Event for (node, key, kind) once; 'created' or 'exists' (a redelivery)."""
        event = client.EventsV1Event(
            metadata=client.V1ObjectMeta(name=event_name(name, key, kind), namespace=EVENT_NAMESPACE),
            event_time=at,
            reporting_controller=REPORTING_CONTROLLER,
            reporting_instance=self.reporting_instance,
            action=action[:128],
            reason=reason[:128],
            type=event_type,
            note=note[:NOTE_MAX],
            regarding=client.V1ObjectReference(kind="Node", name=name, uid=name, api_version="v1"),
        )
        try:
            self._call(f"create event on {name}", self.events.create_namespaced_event, EVENT_NAMESPACE, event)
        except PermanentError as exc:
            if exc.status == 409:
                return "exists"
            raise
        return "created"

    def event_series(self, name: str, req: CordonRequest, at: datetime, note: str) -> str:
        """A repeat of the incident: update the cordon Event's series (count, lastObservedTime).
        Events expire (the API server's --event-ttl, 1 h by default); then it is created again."""
        ev_name = event_name(name, req.incident_id, "cordon")
        body = {"series": {"count": req.count, "lastObservedTime": at.isoformat()}}
        try:
            self._call(f"update event on {name}", self.events.patch_namespaced_event, ev_name, EVENT_NAMESPACE, body,
                       _content_type="application/merge-patch+json")
        except PermanentError as exc:
            if exc.status != 404:
                raise
            return self.emit_event(name, key=req.incident_id, kind="cordon", action="Cordon",
                                   reason=condition_reason(req.family), note=note, at=at)
        return "series"

    # --- release ----------------------------------------------------------------------------------

    def apply_release(self, current: NodeRead, *, by: str, reason: str, at: datetime) -> list[str]:
        """Lift xidpipe's cordon and taint, drop its cordon annotations, record who released and why."""
        assert current.node is not None
        incident = current.view.xidpipe_incident or ""
        ops: list[dict[str, Any]] = [{"op": "add", "path": "/spec/unschedulable", "value": False}]
        changed = ["unschedulable"]
        taints = without_our_taint(current.taints)
        if taints is not None:
            ops.append({"op": "add", "path": "/spec/taints", "value": taints})
            changed.append("taint")
        ops.extend({"op": "remove", "path": f"/metadata/annotations/{_escape(k)}"}
                   for k in CORDON_ANNOTATIONS if k in current.view.annotations)
        released = {ANN_RELEASED_AT: at.isoformat(), ANN_RELEASED_BY: by, ANN_RELEASE_REASON: reason[:1024],
                    ANN_RELEASED_INCIDENT: incident}
        ops.extend({"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
                   for k, v in released.items())
        changed.append("annotations")
        self._guarded_patch(current, ops, f"release node {current.view.name}")
        return changed


def api_client_from_kubeconfig(path: str | None, context: str | None) -> client.ApiClient:
    from kubernetes import config

    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=path, context=context, client_configuration=configuration
    )
    return client.ApiClient(configuration)


def api_client_in_cluster() -> client.ApiClient:
    from kubernetes import config

    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return client.ApiClient(configuration)


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404
