"""Kubernetes adapter of the remediation loop (`respond.remediation.port.LoopCluster`), on the
synchronous `kubernetes` client: the node adapter's reads, annotations, pods and evictions
(`respond.cordon.kube_nodes.KubeNodes`), plus the node's boot ID and readiness, the GPURemediation
condition, the loop's Jobs in the release namespace, and the cluster's evidence of a node.

Rights it needs (the chart's RBAC, docs/remediation.md): Jobs in its own namespace (create, get,
delete), the Jobs' pods there (list; their log, when a termination message was cut), what the node
adapter already has (nodes, nodes/status patch, pods and evictions).
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.cordon import ANN_CORDONED_AT, ANN_INCIDENT, ANN_RELEASED_BY, PodRef
from models.remediation_jobs import ANN_HANDOFF_RESULT, MESSAGE_MAX
from models.remediation_loop import JobPhase, JobState, NodeState
from respond.cluster_evidence import describe_node, describe_pod
from respond.cordon.kube_nodes import action_error
from respond.cordon.port import NodeRead
from respond.errors import PermanentError
from respond.quarantine.kube_cluster import KubeCluster

log = logging.getLogger(__name__)

LOG_TAIL_BYTES = 256 * 1024  # a validation's output read from the pod's log when its termination message was cut


class KubeRemediation(KubeCluster):
    """The loop's cluster calls, beside every port of the node and GPU adapter (`KubeCluster`); Jobs live in
    `namespace`. Its writes (the condition, the Jobs) go through the node adapter's fenced write path."""

    def __init__(self, api_client: client.ApiClient, *, namespace: str, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        self.namespace = namespace
        self.batch = client.BatchV1Api(api_client)
        self._conditions: dict[tuple[str, str], tuple[str, str, str]] = {}

    # --- the node ---------------------------------------------------------------------------------

    def node_state(self, name: str) -> tuple[NodeState, NodeRead]:
        try:
            node = self._call(f"read node {name}", self.core.read_node, name)
        except PermanentError as exc:
            if exc.status == 404:
                read = self.read(name)
                return NodeState(exists=False), read
            raise
        self._saw(node)
        read = self._node_read(name, node)
        view = read.view
        status = node.status or client.V1NodeStatus()
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
        state = NodeState(
            exists=True,
            cordoned_for=view.xidpipe_incident if view.cordoned_by_xidpipe and view.unschedulable else None,
            released_by=view.annotations.get(ANN_RELEASED_BY), boot_id=status.node_info.boot_id if status.node_info
            else "", ready=ready, handoff_result=view.annotations.get(ANN_HANDOFF_RESULT))
        for c in status.conditions or []:
            self._conditions[(name, c.type)] = (c.status, c.reason or "", c.message or "")
        return state, read

    def node_states(self) -> dict[str, NodeState]:
        """Every node as the loop looks at it, from one list (raw JSON: a pass over many loops reads the
        cluster once instead of once per loop)."""
        response = self._call("list nodes", self.core.list_node, _preload_content=False)
        out: dict[str, NodeState] = {}
        for n in json.loads(response.data).get("items") or []:
            meta, spec, status = n.get("metadata") or {}, n.get("spec") or {}, n.get("status") or {}
            annotations = meta.get("annotations") or {}
            mine = ANN_CORDONED_AT in annotations and bool(spec.get("unschedulable"))
            conditions = status.get("conditions") or []
            out[str(meta.get("name"))] = NodeState(
                exists=True, cordoned_for=annotations.get(ANN_INCIDENT) if mine else None,
                released_by=annotations.get(ANN_RELEASED_BY), boot_id=(status.get("nodeInfo") or {}).get("bootID", ""),
                ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
                handoff_result=annotations.get(ANN_HANDOFF_RESULT))
        return out

    def set_node_condition(self, name: str, kind: str, status: str, reason: str, message: str, at: datetime) -> bool:
        """Set the node condition `kind` unless it says the same already; whether it was written."""
        wanted = (status, reason, message[:1024])
        if self._conditions.get((name, kind)) == wanted:
            return False
        stamp = at.replace(microsecond=0).isoformat()
        condition = {"type": kind, "status": status, "reason": reason, "message": wanted[2],
                     "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        self._saw(self._write(f"set condition {kind} on {name}", self.core.patch_node_status, name,
                              {"status": {"conditions": [condition]}}))
        self._conditions[(name, kind)] = wanted
        return True

    def pool_size(self, key: str, pool: str) -> int:
        return len(self._list_pool(key, pool, 0))

    # --- Jobs -------------------------------------------------------------------------------------

    def create_job(self, manifest: dict[str, Any]) -> str:
        """Create the Job; 'exists' when a Job of that name is there already (created before a restart)."""
        try:
            self._write(f"create job {manifest['metadata']['name']}", self.batch.create_namespaced_job,
                        self.namespace, manifest)
        except PermanentError as exc:
            if exc.status == 409:
                return "exists"
            raise
        return "created"

    def delete_job(self, name: str) -> None:
        try:
            self._write(f"delete job {name}", self.batch.delete_namespaced_job, name, self.namespace,
                        propagation_policy="Background")
        except PermanentError as exc:
            if exc.status != 404:
                raise

    def job_state(self, name: str) -> JobState:
        try:
            job = self._call(f"read job {name}", self.batch.read_namespaced_job, name, self.namespace)
        except PermanentError as exc:
            if exc.status == 404:
                return JobState(name, "missing")
            raise
        status = job.status or client.V1JobStatus()
        conditions = {c.type: c for c in status.conditions or [] if c.status == "True"}
        phase: JobPhase = "pending"
        reason = ""
        if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
            phase = "succeeded"
        elif "Failed" in conditions or "FailureTarget" in conditions:
            phase = "failed"
            c = conditions.get("Failed") or conditions["FailureTarget"]
            reason = f"{c.reason or ''}: {c.message or ''}".strip(": ")
        elif status.active:
            phase = "running"
        message, why = self._termination(name) if phase in ("succeeded", "failed") else ("", "")
        return JobState(name, phase, message, "; ".join(x for x in (reason, why) if x))

    def _termination(self, job: str) -> tuple[str, str]:
        """The termination message of the Job's pod, and why it ended (its container's reason and exit code)."""
        try:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"batch.kubernetes.io/job-name={job}")
        except ApiException as exc:
            raise action_error(exc) from exc
        for pod in pods.items:
            for cs in (pod.status.container_statuses if pod.status else None) or []:
                done = cs.state.terminated if cs.state else None
                if done is None:
                    continue
                why = f"{done.reason or 'terminated'}, exit code {done.exit_code}"
                message = done.message or ""
                if len(message) >= MESSAGE_MAX - 1 or not message:
                    message = self._log(str(pod.metadata.name if pod.metadata else "")) or message
                return message, why
        return "", ""

    def _log(self, pod: str) -> str:
        """The pod's log (a validation's output when its termination message was cut); '' when unreadable."""
        try:
            text = self.core.read_namespaced_pod_log(pod, self.namespace, limit_bytes=LOG_TAIL_BYTES)
        except (ApiException, OSError) as exc:
            log.info("no log of %s: %s", pod, exc)
            return ""
        return str(text or "")

    # --- evidence ---------------------------------------------------------------------------------

    def cluster_evidence(self, node: str, pods: tuple[PodRef, ...]) -> list[dict[str, Any]]:
        """The node's description and conditions, and the incident's pods' descriptions, as captured now."""
        items = [describe_node(self.core, node), *(describe_pod(self.core, p.namespace, p.name)[0] for p in pods[:5])]
        return [i.model_dump(mode="json") for i in items]
