"""Kubernetes adapter of the cordon executor's ports (`port`) and of its steps' (`steps.*`), on the
synchronous `kubernetes` client (the executor runs it in a thread from asyncio code).

What it writes, and how:

- cordon, taint and annotations in ONE JSON patch that starts with a `test` of
  `metadata.resourceVersion`: a read-modify-write of `spec.taints` (which has no merge key) that
  keeps every other owner's taints, and an atomic claim of the cordon (the annotation that says
  xidpipe owns it is never written without the cordon, nor the cordon without it). A moved
  resourceVersion answers 422 (or 409); the caller re-reads, decides again, and retries.
- `xidpipe.io/` annotations (a repeat's count, a step's mark) with a merge patch of the node's
  metadata, nothing else.
- the `GPUHealthy` condition with a strategic-merge patch of `nodes/{name}/status` (conditions
  merge by type), as Node Problem Detector does.
- an events.k8s.io/v1 Event regarding the node, named after the node and the incident, so a
  redelivery finds it (409) instead of creating another; a repeat updates its `series`.
- evictions of the node's pods through the Eviction API (PodDisruptionBudgets honoured), one
  attempt each: the drain keeps its own backoff.

The breaker's pool counts come from a list+watch of the nodes (`node_cache.NodeCache`, started at
the first decision that needs them), fresh as of the newest cordon in the action record; when the
cache does not get there in time (or `watch_nodes` is off) the pool is listed instead.

Fencing: every write above (the cordon and release patches, annotations, the condition, Events,
evictions) goes through one method, `_write`, which asks the adapter's `port.WriteFence` (the
Lease election's `check_write`, when replicas are elected) right before each attempt it sends, and
sends nothing when the fence refuses (`respond.errors.Fenced`). Each write has a request timeout
(`write_timeout_s`): the longest a write can take after its check, which the election's margin must
cover (docs/respond.md, "Fencing").

The client's failures are translated into `respond.errors`: HTTP 429 and 5xx, a missing status,
connection errors and timeouts are `TemporaryError`, anything else `PermanentError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.cordon import (
    ANN_CORDONED_AT,
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
    condition_reason,
    cordon_annotations,
    pool_of,
    with_our_taint,
    without_our_taint,
)
from models.cordon_policy import CordonPolicy
from respond.cordon.node_cache import NodeCache
from respond.cordon.port import Conflict, NodeCondition, NodeRead, WriteFence
from respond.cordon.retry import Backoff, call_with_retry
from respond.cordon.settings import ActionSettings
from respond.cordon.steps.drain import PodInfo
from respond.errors import ActionError, Fenced, PermanentError, TemporaryError

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "xidpipe.io/worker"
EVENT_NAMESPACE = "default"  # events about cluster-scoped objects (nodes) live in default
NOTE_MAX = 1024
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
ANNOTATION_PREFIX = "xidpipe.io/"  # the only annotations the chart's admission policy lets the responder change
T = TypeVar("T")


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUS or not exc.status
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}: {(exc.body or '')[:300]}".strip()
    return f"{type(exc).__name__}: {exc}"


def action_error(exc: BaseException) -> ActionError:
    """The client's failure in `respond.errors` words, with its HTTP status when it had one."""
    status = int(exc.status) if isinstance(exc, ApiException) and exc.status else None
    return (TemporaryError if is_transient(exc) else PermanentError)(describe(exc), status)


def call_api(fn: Callable[[], T], what: str, backoff: Backoff, *, sleep: Callable[[float], None] = time.sleep,
             clock: Callable[[], float] = time.monotonic) -> T:
    """`fn()` with its failures translated (`action_error`), transient ones retried within `backoff`."""

    def attempt() -> T:
        try:
            return fn()
        except ActionError:
            raise
        except Exception as exc:
            raise action_error(exc) from exc

    return call_with_retry(attempt, what, backoff, sleep=sleep, clock=clock)


def _escape(key: str) -> str:
    """A JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def event_name(node: str, incident_id: str, kind: str = "cordon") -> str:
    """A stable Event name per (node, incident, kind), within the 253 characters an object name may have."""
    digest = hashlib.sha256(f"{incident_id}\x1f{kind}".encode()).hexdigest()[:12]
    suffix = f".xidpipe-{kind}.{digest}"
    return node[: 253 - len(suffix)].rstrip(".-") + suffix


class KubeNodes:
    """The executor's ports and its steps' on the Kubernetes API: node reads and writes, each retried on
    transient errors (429, 5xx, connection) within `backoff`; pod reads and evictions, one attempt each.

    `watch_nodes`: keep the pool counts in a `NodeCache` (one, for the pool label of the first
    decision); `cache_wait_s`: how long a decision waits for it to be fresh before listing; `fence`:
    asked before every write (None: every write is sent); `write_timeout_s`: each write request's
    timeout."""

    def __init__(
        self, api_client: client.ApiClient, *, reporting_instance: str, backoff: Backoff | None = None,
        watch_nodes: bool = True, cache_wait_s: float = 5.0, fence: WriteFence | None = None,
        write_timeout_s: float | None = None,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.events = client.EventsV1Api(api_client)
        self.reporting_instance = reporting_instance[:128]
        self.backoff = backoff or Backoff()
        self.watch_nodes = watch_nodes
        self.cache_wait_s = cache_wait_s
        self.fence = fence
        self.write_timeout_s = write_timeout_s
        self.cache: NodeCache | None = None
        self._cache_lock = threading.Lock()
        self._seen_rv = 0  # the newest node resourceVersion this client has read or written

    def close(self) -> None:
        """Stop the node cache's watch (a later decision starts another)."""
        with self._cache_lock:
            cache, self.cache = self.cache, None
        if cache is not None:
            cache.stop()

    def start_watch(self, pool_label: str, timeout: float = 0.0) -> bool:
        """List and watch the nodes now, by `pool_label` (the responder, as it starts), rather than at the
        first decision, which would wait for the list of every node; whether it listed within `timeout`."""
        cache = self._cache_for(pool_label)
        return cache is not None and cache.synced(timeout)

    def _cache_for(self, pool_label: str) -> NodeCache | None:
        if not self.watch_nodes:
            return None
        with self._cache_lock:
            if self.cache is None:
                self.cache = NodeCache(self.core, pool_label).start()
            return self.cache if self.cache.pool_label == pool_label else None

    def _saw(self, node: client.V1Node | dict[str, Any] | None) -> None:
        if isinstance(node, dict):
            rv = (node.get("metadata") or {}).get("resourceVersion")
        else:
            rv = node.metadata.resource_version if node is not None and node.metadata else None
        if rv and rv.isdigit():
            self._seen_rv = max(self._seen_rv, int(rv))

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return call_api(lambda: fn(*args, **kwargs), what, self.backoff)

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        """A node as the API server sent it (`_preload_content=False`): its JSON, not the client's
        models, whose deserialisation costs more than the request (a cordon burst reads and writes
        hundreds of nodes on one core)."""
        body: dict[str, Any] = json.loads(response.data)
        return body

    def _write(self, what: str, fn: Any, *args: Any, once: bool = False, **kwargs: Any) -> Any:
        """Every cluster write this adapter sends goes through here: the fence right before each
        attempt (`Fenced`, nothing sent, when it refuses), the request timeout, and transient failures
        retried within the backoff (`once`: one attempt, the caller keeps its own backoff)."""
        if self.write_timeout_s is not None:
            kwargs["_request_timeout"] = self.write_timeout_s

        def send() -> Any:
            if self.fence is not None:
                verdict = self.fence.check_write()
                if not verdict.allowed:
                    log.error("fenced: %s not sent: %s", what, verdict.reason, extra={"what": what})
                    raise Fenced(f"{what}: not sent: {verdict.reason}")
            return fn(*args, **kwargs)

        if not once:
            return call_api(send, what, self.backoff)
        try:
            return send()
        except ApiException as exc:
            raise action_error(exc) from exc
        except ActionError:
            raise
        except Exception as exc:
            if is_transient(exc):
                raise action_error(exc) from exc
            raise

    # --- reads ------------------------------------------------------------------------------------

    def read(self, name: str) -> NodeRead:
        """The node, from the API server's watch cache but never older than the newest node version this
        client has read or written (a GET's resourceVersion is "not older than"; a quorum read from etcd
        before the first). A write decided on it is guarded by its resourceVersion (`_guarded_patch`):
        a node changed since is read again and decided again."""
        try:
            node = self._call(f"read node {name}", self._get_node, name, str(self._seen_rv) if self._seen_rv else None)
        except PermanentError as exc:
            if exc.status == 404:
                return NodeRead(NodeView(name=name, exists=False))
            raise
        self._saw(node)
        return self._node_read(name, node)

    def _get_node(self, name: str, resource_version: str | None) -> dict[str, Any]:
        """GET the node as JSON, with `resourceVersion` when given (the generated `read_node` has no such
        parameter): the request as the client builds it, its errors raised as the client raises them."""
        query = [("resourceVersion", resource_version)] if resource_version else []
        request = self.api_client.param_serialize(
            method="GET", resource_path="/api/v1/nodes/{name}", path_params={"name": name}, query_params=query,
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request)
        response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return self._json(response)

    def _node_read(self, name: str, node: client.V1Node | dict[str, Any]) -> NodeRead:
        if isinstance(node, dict):
            return _node_read_json(name, node)
        meta, spec = node.metadata or client.V1ObjectMeta(), node.spec
        taints: list[dict[str, Any]] = (
            list(self.api_client.sanitize_for_serialization(spec.taints or [])) if spec else []  # type: ignore[no-untyped-call]
        )
        view = NodeView(
            name=name, labels=dict(meta.labels or {}), annotations=dict(meta.annotations or {}),
            unschedulable=bool(spec and spec.unschedulable), taint_keys=tuple(t["key"] for t in taints),
        )
        return NodeRead(view, meta.resource_version, taints, _gpu_condition(node))

    def fleet_view(self, policy: CordonPolicy, labels: dict[str, str], cordons_last_hour: int,
                   fresh_as_of: int = 0, *, node: str = "", quarantines_as_of: int | None = None) -> FleetView:
        """The node's pool: its size and how many of its nodes xidpipe holds cordoned now, counting every
        node write up to the resourceVersion `fresh_as_of` (the newest cordon in the action record).
        With `quarantines_as_of` (the newest quarantine's rule version), its GPUs and xidpipe's
        quarantines among them too (`pool_gpus`, where an adapter knows GPUs; none here).

        From the node cache when it gets that fresh within `cache_wait_s`; else by listing the pool."""
        pool = pool_of(policy, labels)
        key = policy.scope.pool_label
        cache = self._cache_for(key)
        counts = cache.pool_counts(pool, fresh_as_of, self.cache_wait_s) if cache is not None else None
        members: dict[str, bool] | None = None
        if counts is not None and cache is not None and quarantines_as_of is not None:
            members = cache.pool_members(pool)
        if counts is None:
            if cache is not None:
                log.warning("node cache not fresh as of resourceVersion %s within %.1f s: listing pool '%s'",
                            fresh_as_of, self.cache_wait_s, pool)
            members = self._list_pool(key, pool, fresh_as_of)
            counts = len(members), sum(members.values())
        fleet = FleetView(pool=pool, pool_nodes=counts[0], pool_cordoned_by_xidpipe=counts[1],
                          cordons_last_hour=cordons_last_hour)
        if quarantines_as_of is None or members is None:
            return fleet
        return self.pool_gpus(fleet, members, node, policy, quarantines_as_of)

    def pool_gpus(self, fleet: FleetView, members: dict[str, bool], node: str, policy: CordonPolicy,
                  quarantines_as_of: int) -> FleetView:
        """The fleet view with the pool's GPUs and quarantines: none known to a node adapter alone
        (`respond.quarantine.kube_cluster.KubeCluster` counts them)."""
        return fleet

    def _list_pool(self, key: str, pool: str, fresh_as_of: int) -> dict[str, bool]:
        """The pool's nodes, each with whether xidpipe holds its cordon, listed (label selector, raw
        JSON: deserialising every node into client models would cost more than the request itself).
        Served from the API server's cache, but never older than `fresh_as_of` nor the newest node
        version this client has read or written (`resourceVersionMatch=NotOlderThan`)."""
        selector = f"{key}={pool}" if pool else f"!{key}"
        freshness: dict[str, str] = {}
        if max(self._seen_rv, fresh_as_of):
            freshness = {"resource_version": str(max(self._seen_rv, fresh_as_of)),
                         "resource_version_match": "NotOlderThan"}
        response = self._call("list nodes", self.core.list_node, label_selector=selector, _preload_content=False,
                              **freshness)
        items = json.loads(response.data).get("items") or []
        return {
            str((n.get("metadata") or {}).get("name")):
                ANN_CORDONED_AT in ((n.get("metadata") or {}).get("annotations") or {})
                and bool((n.get("spec") or {}).get("unschedulable"))
            for n in items
        }

    # --- cordon -----------------------------------------------------------------------------------

    def _guarded_patch(self, current: NodeRead, ops: list[dict[str, Any]], what: str) -> NodeRead:
        body = [{"op": "test", "path": "/metadata/resourceVersion", "value": current.resource_version}, *ops]
        try:
            patched = self._json(self._write(what, self.core.patch_node, current.view.name, body,
                                             _preload_content=False))
            self._saw(patched)
            written = self._node_read(current.view.name, patched)
            if self.cache is not None:
                self.cache.observe_node(written)
            return written
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
    ) -> tuple[list[str], NodeRead]:
        """Cordon, taint and claim the node in one guarded patch; returns what changed and the node."""
        assert current.view.exists
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
        if not current.view.annotations:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": annotations})
        else:
            ops.extend({"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
                       for k, v in annotations.items())
        changed.append("annotations")
        written = self._guarded_patch(current, ops, f"cordon node {current.view.name}")
        if self.cache is not None:
            self.cache.observe_node(written, own_cordon=True)
        return changed, written

    def annotate(self, name: str, annotations: dict[str, str]) -> None:
        """Set these annotations on the node in one merge patch; only xidpipe's own (`xidpipe.io/`)."""
        foreign = sorted(k for k in annotations if not k.startswith(ANNOTATION_PREFIX))
        if foreign:
            raise PermanentError(f"xidpipe writes only {ANNOTATION_PREFIX} annotations, not {', '.join(foreign)}")
        self._saw(self._json(self._write(f"annotate node {name}", self.core.patch_node, name,
                                         {"metadata": {"annotations": annotations}},
                                         _content_type="application/merge-patch+json", _preload_content=False)))

    def set_condition(self, name: str, status: str, reason: str, message: str, at: datetime,
                      existing: NodeCondition | None) -> bool:
        """Set the GPUHealthy condition unless it already says the same; returns whether it changed."""
        if existing is not None and (existing.status, existing.reason, existing.message) == (status, reason, message):
            return False
        stamp = at.replace(microsecond=0).isoformat()
        transition = stamp
        if existing is not None and existing.status == status and existing.last_transition is not None:
            transition = existing.last_transition.isoformat()
        condition = {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message,
                     "lastHeartbeatTime": stamp, "lastTransitionTime": transition}
        self._saw(self._json(self._write(f"set condition on {name}", self.core.patch_node_status, name,
                                         {"status": {"conditions": [condition]}}, _preload_content=False)))
        return True

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
            self._write(f"create event on {name}", self.events.create_namespaced_event, EVENT_NAMESPACE, event)
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
            self._write(f"update event on {name}", self.events.patch_namespaced_event, ev_name, EVENT_NAMESPACE, body,
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
        assert current.view.exists
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

    # --- pods -------------------------------------------------------------------------------------

    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        try:
            return _pod_info(self.core.read_namespaced_pod(name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise action_error(exc) from exc

    def node_pods(self, node: str) -> list[PodInfo]:
        try:
            listed = self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")
        except ApiException as exc:
            raise action_error(exc) from exc
        return [_pod_info(p) for p in listed.items]

    def evict(self, pod: PodInfo, grace_period_s: int | None) -> bool:
        options = client.V1DeleteOptions(grace_period_seconds=grace_period_s) if grace_period_s is not None else None
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace),
                                 delete_options=options)
        try:
            self._write(f"evict pod {pod.key}", self.core.create_namespaced_pod_eviction, pod.name, pod.namespace,
                        body, once=True)
        except PermanentError as exc:
            if exc.status == 404:
                return False
            raise
        return True


def _node_read_json(name: str, node: dict[str, Any]) -> NodeRead:
    """`NodeRead` of a node's JSON (as `KubeNodes._node_read` makes it of the client's model)."""
    meta, spec = node.get("metadata") or {}, node.get("spec") or {}
    taints: list[dict[str, Any]] = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    view = NodeView(
        name=name, labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {}),
        unschedulable=bool(spec.get("unschedulable")), taint_keys=tuple(str(t.get("key")) for t in taints),
    )
    found = next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION_TYPE),
                 None)
    condition = None
    if found is not None:
        at = found.get("lastTransitionTime")
        condition = NodeCondition(found.get("status", ""), found.get("reason"), found.get("message"),
                                  datetime.fromisoformat(at) if at else None)
    return NodeRead(view, meta.get("resourceVersion"), taints, condition)


def _gpu_condition(node: client.V1Node) -> NodeCondition | None:
    found = next((c for c in ((node.status.conditions or []) if node.status else []) if c.type == CONDITION_TYPE),
                 None)
    if found is None:
        return None
    return NodeCondition(found.status, found.reason, found.message, found.last_transition_time)


def _pod_info(pod: client.V1Pod) -> PodInfo:
    meta = pod.metadata or client.V1ObjectMeta()
    resources: set[str] = set()
    for c in (pod.spec.containers or []) if pod.spec else []:
        for amounts in (c.resources.limits, c.resources.requests) if c.resources else ():
            resources.update(k for k, v in (amounts or {}).items() if v)
    return PodInfo(
        namespace=str(meta.namespace), name=str(meta.name), node_name=pod.spec.node_name if pod.spec else None,
        annotations=dict(meta.annotations or {}), owner_kinds=tuple(r.kind for r in meta.owner_references or []),
        terminating=meta.deletion_timestamp is not None, resources=frozenset(resources),
    )


def api_client(settings: ActionSettings) -> client.ApiClient | None:
    """The API client the settings name: a kubeconfig, the pod's service account, or none."""
    from kubernetes import config

    configuration = client.Configuration()
    if settings.kube_mode == "kubeconfig":
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(settings.kubeconfig_path), context=settings.kube_context,
            client_configuration=configuration,
        )
    elif settings.kube_mode == "in-cluster":
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        return None
    return client.ApiClient(configuration)
