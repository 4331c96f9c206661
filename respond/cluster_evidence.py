"""Cluster-side evidence for a dossier, read when the ticket is written: the node's description and
conditions, the pod's description, owner and recent events, and the last lines of the affected
container's log; and the workload's owning team, from the pod's labels and annotations (the keys
`SinkSettings.owner_keys` names, the first present wins).

Each capture is size-capped; environment variables and secrets are never read (a container's
`env` is listed by name only, `envFrom` by source name), and the dossier redacts every text again
when it renders. A capture that fails says why instead of failing the ticket.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from models.dossier import EvidenceItem

log = logging.getLogger(__name__)

OWNER_KEYS = ("team", "owner", "app.kubernetes.io/part-of")
CAP_BYTES = 16 * 1024
LOG_TAIL_LINES = 50
EVENTS_LIMIT = 20


def _cap(text: str) -> str:
    raw = text.encode("utf-8")
    return text if len(raw) <= CAP_BYTES else raw[:CAP_BYTES].decode("utf-8", "ignore") + "\n[cut]"


def _item(name: str, status: str, text: str) -> EvidenceItem:
    return EvidenceItem(name=name, source="cluster", captured_at=datetime.now(UTC), status=status, content=_cap(text))


def _why(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return type(exc).__name__


def describe_node(core: client.CoreV1Api, name: str) -> EvidenceItem:
    try:
        node: Any = core.read_node(name)
    except (ApiException, OSError) as exc:
        return _item("node description", "error", f"node {name}: {_why(exc)}")
    labels = node.metadata.labels or {}
    lines = [f"Name: {name}", f"Unschedulable: {bool(node.spec.unschedulable)}", "Labels:"]
    lines += [f"  {k}={v}" for k, v in sorted(labels.items())]
    lines.append("Taints:")
    lines += [f"  {t.key}={t.value or ''}:{t.effect}" for t in node.spec.taints or []] or ["  none"]
    lines.append("Conditions:")
    for c in (node.status.conditions if node.status else None) or []:
        lines.append(f"  {c.type}={c.status} reason={c.reason or ''} since={c.last_transition_time or ''}: "
                     f"{c.message or ''}")
    alloc = (node.status.allocatable if node.status else None) or {}
    gpus = {k: v for k, v in alloc.items() if "nvidia.com" in k}
    lines.append(f"Allocatable GPUs: {gpus or 'none'}")
    return _item("node description", "ok", "\n".join(lines))


def _owner(pod: Any) -> str | None:
    refs = pod.metadata.owner_references or []
    ref = next((r for r in refs if r.controller), refs[0] if refs else None)
    return f"{ref.kind}/{ref.name}" if ref else None


def owning_team(metadata: Any, keys: Sequence[str] = OWNER_KEYS) -> str | None:
    """The first of `keys` set in the object's labels, then its annotations; None if none is."""
    for source in (metadata.labels or {}, metadata.annotations or {}):
        for key in keys:
            value = str(source.get(key) or "").strip()
            if value:
                return value
    return None


def describe_pod(core: client.CoreV1Api, namespace: str, name: str,
                 owner_keys: Sequence[str] = OWNER_KEYS) -> tuple[EvidenceItem, str | None]:
    """The pod's description, and its owning team (from `owner_keys`) where it names one."""
    try:
        pod: Any = core.read_namespaced_pod(name, namespace)
    except (ApiException, OSError) as exc:
        return _item("pod description", "error", f"pod {namespace}/{name}: {_why(exc)}"), None
    owner = _owner(pod)
    team = owning_team(pod.metadata, owner_keys)
    lines = [f"Name: {namespace}/{name}", f"Node: {pod.spec.node_name}", f"Phase: {pod.status.phase}",
             f"Owner: {owner or 'none'}", *([f"Team: {team}"] if team else []), "Labels:"]
    lines += [f"  {k}={v}" for k, v in sorted((pod.metadata.labels or {}).items())]
    statuses = {s.name: s for s in (pod.status.container_statuses or [])}
    for c in pod.spec.containers:
        st = statuses.get(c.name)
        limits = (c.resources.limits if c.resources else None) or {}
        lines.append(f"Container {c.name}: image {c.image}, GPU limit {limits.get('nvidia.com/gpu', 'none')}, "
                     f"restarts {st.restart_count if st else '?'}")
        # Environment values never leave the cluster: names only.
        env_names = [e.name for e in c.env or []]
        if env_names:
            lines.append(f"  env (names only): {', '.join(env_names)}")
    return _item("pod description", "ok", "\n".join(lines)), team


def pod_events(core: client.CoreV1Api, namespace: str, name: str) -> EvidenceItem:
    try:
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    except (ApiException, OSError) as exc:
        return _item("pod events", "error", f"events of {namespace}/{name}: {_why(exc)}")

    def when(e: Any) -> str:
        t = e.last_timestamp or e.event_time or e.first_timestamp or e.metadata.creation_timestamp
        return t.isoformat() if t else ""

    recent = sorted(events, key=when)[-EVENTS_LIMIT:]
    lines = [f"{when(e)} {e.type} {e.reason} x{e.count or 1}: {e.message or ''}" for e in recent]
    return _item("pod events", "ok", "\n".join(lines) or "no events")


def container_log(core: client.CoreV1Api, namespace: str, name: str, container: str | None) -> EvidenceItem:
    try:
        text = core.read_namespaced_pod_log(name, namespace, container=container, tail_lines=LOG_TAIL_LINES,
                                            limit_bytes=CAP_BYTES)
    except (ApiException, OSError) as exc:
        return _item("container log (last lines)", "error", f"log of {namespace}/{name}/{container}: {_why(exc)}")
    return _item("container log (last lines)", "ok", text or "")


def namespace_meta(api: client.ApiClient, namespace: str) -> dict[str, str]:
    """The namespace's labels and annotations (a team names its chat channel there); {} if unreadable."""
    try:
        ns: Any = client.CoreV1Api(api).read_namespace(namespace)
    except (ApiException, OSError) as exc:
        log.warning("namespace %s not readable for routing: %s", namespace, _why(exc))
        return {}
    return {**(ns.metadata.labels or {}), **(ns.metadata.annotations or {})}


def capture(api: client.ApiClient, node: str, namespace: str | None, pod: str | None,
            container: str | None, owner_keys: Sequence[str] = OWNER_KEYS) -> tuple[list[EvidenceItem], str | None]:
    """The cluster-side evidence items, and the workload's owning team when its pod names one."""
    core = client.CoreV1Api(api)
    items = [describe_node(core, node)]
    owner = None
    if namespace and pod:
        described, owner = describe_pod(core, namespace, pod, owner_keys or OWNER_KEYS)
        items += [described, pod_events(core, namespace, pod), container_log(core, namespace, pod, container)]
    return items, owner
