"""The workloads sensor: which workload each of the node's GPU pods belongs to, from the API server.

It lists the node's pods (`spec.nodeName=<node>`), then watches them from the list's
resourceVersion (bookmarks keep that version fresh; a watch the server ends is resumed from it; a
410 means it is too old, and the pods are listed again). For each pod that asks for a GPU
(`models.workloads.holds_gpu`) it decides the workload (`models.workloads.workload_of`), reading the
owners its labels do not name (a Job's CronJob, a RayCluster's RayJob) once per owner, kept in a
cache. It publishes the node's snapshot (`models.node_records.PodWorkloads`) when it changes and
again every `heartbeat_s`, the same record (a state record a full spool may drop is sent again).
Nothing here is asked per fault: the stream joins a fault's pod with the snapshot valid at its time.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agents.metrics import Metrics
from agents.signals.base import SensorContext
from agents.signals.workloads.port import Expired, PodSource
from models.node_records import PodWorkload, PodWorkloads
from models.workloads import OwnerRef, PodFacts, controller_of, holds_gpu, pod_facts, workload_of

log = logging.getLogger(__name__)

# The owners the sensor reads, by (API group, kind) → their resource: what the chart's RBAC grants
# `get` on (deploy/README.md says why each).
READ_OWNERS: Mapping[tuple[str, str], str] = {
    ("batch", "Job"): "jobs",  # a CronJob's Jobs, an MPIJob's launcher, a RayJob's submitter
    ("ray.io", "RayCluster"): "rayclusters",  # a RayJob's or RayService's cluster
}
_MAX_CHAIN = 4  # owners read above a pod's controller
_MAX_RETRY_S = 60.0  # the longest wait between failed rounds (the wait doubles from `retry_s`)


@dataclass(frozen=True, slots=True)
class WorkloadsSettings:
    """The sensor's own settings (`AgentSettings`: `workloads_kube_config`, `workloads_heartbeat_s`,
    `workloads_watch_timeout_s`, `workloads_retry_s`, `gpu_resource_prefixes`)."""

    kube_config: str = "in-cluster"
    heartbeat_s: float = 600.0
    watch_timeout_s: int = 300
    retry_s: float = 5.0
    owner_cache: int = 4096
    resource_prefixes: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/mig-")


class OwnerChains:
    """The owners above a pod's controller, read once per owner (by UID) and kept (an owner reference
    never changes); an owner that could not be read is tried again after `retry_s`."""

    def __init__(self, source: PodSource, size: int, retry_s: float, monotonic: Callable[[], float],
                 metrics: Metrics) -> None:
        self._source, self._size, self._retry_s, self._monotonic = source, size, retry_s, monotonic
        self._metrics = metrics
        self._known: OrderedDict[tuple[str, str, str, str], tuple[OwnerRef, ...]] = OrderedDict()
        self._failed: dict[tuple[str, str, str, str], float] = {}

    def chain(self, pod: PodFacts) -> tuple[OwnerRef, ...]:
        out: list[OwnerRef] = []
        ref = controller_of(pod)
        while ref is not None and len(out) < _MAX_CHAIN:
            plural = READ_OWNERS.get((ref.group, ref.kind))
            if plural is None:
                break
            owners = self._owners(ref, pod.namespace, plural)
            ref = controller_of(PodFacts(namespace=pod.namespace, name=ref.name, owners=owners)) if owners else None
            if ref is not None:
                out.append(ref)
        return tuple(out)

    def _owners(self, ref: OwnerRef, namespace: str, plural: str) -> tuple[OwnerRef, ...]:
        key = (namespace, ref.kind, ref.name, ref.uid or "")
        if key in self._known:
            self._known.move_to_end(key)
            return self._known[key]
        if self._monotonic() < self._failed.get(key, 0.0):
            return ()
        try:
            self._metrics.inc("xidpipe_agent_workloads_owner_reads_total")
            found = self._source.owners_of(ref, namespace, plural)
        except Exception as exc:  # refused (RBAC) or unreachable: the chain stops here for now
            now = self._monotonic()
            if len(self._failed) >= self._size:  # bounded: forget the owners whose wait is over
                self._failed = {k: until for k, until in self._failed.items() if until > now}
            self._failed[key] = now + self._retry_s
            log.warning("cannot read %s %s/%s for its owner: %s", ref.kind, namespace, ref.name, exc,
                        extra={"owner_kind": ref.kind, "namespace": namespace, "owner": ref.name})
            return ()
        self._failed.pop(key, None)
        self._known[key] = found or ()  # None: it is gone; its pods keep the owner they name
        while len(self._known) > self._size:
            self._known.popitem(last=False)
        return found or ()


class WorkloadsSensor:
    def __init__(self, ctx: SensorContext[WorkloadsSettings]) -> None:
        self._ctx = ctx
        self._settings = ctx.settings
        self._source: PodSource | None = None
        self._chains: OwnerChains | None = None
        self._pods: dict[str, PodWorkload] = {}  # by pod UID (or namespace/name)
        self._version: str | None = None  # where the watch resumes; None: list first
        self._record: PodWorkloads | None = None
        self._sent_at = 0.0  # monotonic time the record was last published
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="workloads", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._source is not None:
            self._source.close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        wait = self._settings.retry_s
        while not self._stop.is_set():
            try:
                self.step()
                wait = self._settings.retry_s
            except Exception as exc:  # the API server unreachable or refusing: tried again, ever less often
                if self._stop.is_set():
                    return  # `close` ended the watch
                self._ctx.metrics.inc("xidpipe_agent_workloads_errors_total")
                log.warning("pod watch failed, retrying in %.0f s: %s", wait, exc, extra={"node": self._ctx.node})
                self._stop.wait(wait)
                wait = min(wait * 2, _MAX_RETRY_S)

    def step(self) -> None:
        """List the pods if there is no version to resume from, then watch until the server ends the
        watch (or `close`): one round of the sensor's loop."""
        source = self._connect()
        if self._version is None:
            self._relist(source)
        self._ctx.metrics.inc("xidpipe_agent_workloads_watches_total")
        try:
            for kind, obj in source.watch(self._version or "", self._settings.watch_timeout_s):
                self._event(kind, obj)
                self._heartbeat()
                if self._stop.is_set():
                    return
        except Expired as exc:
            log.info("pod watch expired (%s): listing again", exc, extra={"node": self._ctx.node})
            self._version = None
        self._heartbeat()

    def _connect(self) -> PodSource:
        if self._source is None:
            from agents.signals.workloads.kube import KubePods

            self._source = KubePods(self._ctx.node, self._settings.kube_config)
        if self._chains is None:
            s = self._settings
            self._chains = OwnerChains(self._source, s.owner_cache, s.retry_s, self._ctx.clock.monotonic,
                                       self._ctx.metrics)
        return self._source

    def _relist(self, source: PodSource) -> None:
        pods, version = source.list()
        self._ctx.metrics.inc("xidpipe_agent_workloads_lists_total")
        self._pods = {}
        for obj in pods:
            self._keep(obj)
        self._version = version
        self._publish_if_changed()

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self._version = str(meta.get("resourceVersion") or self._version or "")
        if kind == "BOOKMARK":
            return
        if kind == "DELETED":
            self._pods.pop(_pod_key(meta), None)
        else:
            self._keep(obj)
        self._publish_if_changed()

    def _keep(self, obj: dict[str, Any]) -> None:
        """Remember the pod's workload if it asks for a GPU and still runs; forget it otherwise."""
        key = _pod_key(obj.get("metadata") or {})
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Succeeded", "Failed") or not holds_gpu(obj, self._settings.resource_prefixes):
            self._pods.pop(key, None)
            return
        facts = pod_facts(obj)
        assert self._chains is not None
        ref = workload_of(facts, self._chains.chain(facts))
        self._pods[key] = PodWorkload(namespace=facts.namespace, pod=facts.name, uid=facts.uid, workload=ref)

    def _publish_if_changed(self) -> None:
        pods = tuple(sorted(self._pods.values(), key=lambda p: (p.namespace, p.pod)))
        if self._record is not None and self._record.pods == pods:
            return
        clock = self._ctx.clock
        self._record = PodWorkloads(node=self._ctx.node, record_id=f"pod-workloads:{clock.time_ns()}",
                                    changed_at=clock.now(), pods=pods)
        log.info("GPU pods' workloads changed", extra={"node": self._ctx.node, "pods": len(pods)})
        self._send()

    def _heartbeat(self) -> None:
        """The last record again once `heartbeat_s` passed: the same record id, so the stream keeps one."""
        if self._record is not None and self._ctx.clock.monotonic() - self._sent_at >= self._settings.heartbeat_s:
            self._send()

    def _send(self) -> None:
        assert self._record is not None
        self._ctx.publish(self._record)
        self._sent_at = self._ctx.clock.monotonic()
        self._ctx.metrics.set("xidpipe_agent_workloads_pods", len(self._record.pods))


def _pod_key(meta: Mapping[str, Any]) -> str:
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
