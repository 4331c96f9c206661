"""Attribute a fault to a GPU, a pod and a process, with the node state valid at the fault's time.

Pure functions over a node's state history:

- PCI address → GPU UUID and serial, from the node's NVML inventory snapshots and from the driver's
  identity lines in the kernel log (`NVRM: GPU at PCI:...: GPU-<uuid>`, `GPU Board Serial Number`);
- MIG device → its parent GPU;
- GPU (or MIG device) → the pod, namespace and container the kubelet had allocated it to at the
  fault's time (PodResources history); when pods share the GPU, the faulting process's pod UID
  (from its cgroup) says which;
- pid → process, container and pod from the GPU process snapshots;
- pod → its workload (its owner chain and its controllers' labels, read from the API server by the
  agent's workloads sensor: `models.workloads`), from the workload snapshots; the pod's name without
  its generated suffixes (`workload_name`) only for a pod no snapshot names.

A snapshot is valid at time t when it is the latest one taken at or before t (plus the policy's
clock skew). t is the fault's event time (the kernel's clock, `models.event_time`), never the time
the line was read: a backlog read an hour late is joined with the pods of the fault's time. When
nothing matches, the attribution says "unknown" explicitly and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from models.node_records import DeviceAssignment, GpuInfo, GpuProcess, PodWorkload
from models.pci import normalize_pci
from models.workloads import WorkloadRef

UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class InventorySnapshot:
    at: datetime
    gpus: tuple[GpuInfo, ...]


@dataclass(frozen=True, slots=True)
class IdentityLine:
    """What a kernel-log identity line says about a GPU."""

    at: datetime
    pci: str
    uuid: str | None
    serial: str | None


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    at: datetime
    assignments: tuple[DeviceAssignment, ...]


@dataclass(frozen=True, slots=True)
class ProcessSnapshot:
    at: datetime
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True, slots=True)
class WorkloadSnapshot:
    """The workloads of a node's GPU pods as the API server had them (`models.node_records.PodWorkloads`)."""

    at: datetime
    pods: tuple[PodWorkload, ...]


@dataclass(slots=True)
class NodeHistory:
    """A node's state records, each list in time order."""

    node: str
    inventories: list[InventorySnapshot] = field(default_factory=list)
    identities: list[IdentityLine] = field(default_factory=list)
    pods: list[PodSnapshot] = field(default_factory=list)
    processes: list[ProcessSnapshot] = field(default_factory=list)
    workloads: list[WorkloadSnapshot] = field(default_factory=list)

    def sort(self) -> NodeHistory:
        self.inventories.sort(key=lambda s: s.at)
        self.identities.sort(key=lambda s: s.at)
        self.pods.sort(key=lambda s: s.at)
        self.processes.sort(key=lambda s: s.at)
        self.workloads.sort(key=lambda s: s.at)
        return self


@dataclass(frozen=True, slots=True)
class GpuAttribution:
    uuid: str | None
    serial: str | None
    pci: str | None
    index: int | None
    name: str | None
    mig_uuid: str | None
    source: str  # "inventory", "kernel_identity", "event", "unknown"
    reason: str


@dataclass(frozen=True, slots=True)
class PodAttribution:
    pod: str | None
    namespace: str | None
    container: str | None
    source: str  # "podresources", "pod_uid", "ambiguous", "unknown"
    reason: str
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessAttribution:
    pid: int | None
    process: str | None
    container_id: str | None
    pod_uid: str | None
    source: str  # "snapshot", "kernel_line", "unknown"
    reason: str


@dataclass(frozen=True, slots=True)
class WorkloadAttribution:
    name: str | None  # the workload's identity: `WorkloadRef.key`, else what `workload_name` guesses
    ref: WorkloadRef | None  # its kind, group, namespace and name when the API server said so
    source: str  # "api", "pod_name", "process", "unknown"
    reason: str


@dataclass(frozen=True, slots=True)
class Attribution:
    gpu: GpuAttribution
    pod: PodAttribution
    process: ProcessAttribution
    owner: WorkloadAttribution | None = None  # None: not resolved (the name heuristics stand in)

    @property
    def workload(self) -> str | None:
        if self.owner is not None:
            return self.owner.name
        return workload_name(self.pod.namespace, self.pod.pod, self.pod.container, self.process.process)

    def to_dict(self) -> dict[str, Any]:
        g, p, r, o = self.gpu, self.pod, self.process, self.owner
        out = {
            "gpu": {"uuid": g.uuid, "serial": g.serial, "pci": g.pci, "index": g.index, "name": g.name,
                    "mig_uuid": g.mig_uuid, "source": g.source, "reason": g.reason},
            "pod": {"pod": p.pod, "namespace": p.namespace, "container": p.container, "source": p.source,
                    "reason": p.reason, "candidates": list(p.candidates)},
            "process": {"pid": r.pid, "process": r.process, "container_id": r.container_id,
                        "pod_uid": r.pod_uid, "source": r.source, "reason": r.reason},
            "workload": self.workload,
        }
        if o is not None:
            ref = o.ref
            out["workload_owner"] = {"kind": ref.kind if ref else None, "group": ref.group if ref else None,
                                     "name": ref.name if ref else None, "how": ref.how if ref else None,
                                     "source": o.source, "reason": o.reason}
        return out


_S = TypeVar("_S", InventorySnapshot, PodSnapshot, ProcessSnapshot, IdentityLine, WorkloadSnapshot)


def valid_at(snapshots: Sequence[_S], at: datetime, skew_s: float = 0.0) -> _S | None:
    """The latest snapshot taken at or before `at` + skew (snapshots sorted by time)."""
    limit = at + timedelta(seconds=skew_s)
    best: _S | None = None
    for snap in snapshots:
        if snap.at <= limit:
            best = snap
        else:
            break
    return best


def resolve_gpu(
    history: NodeHistory,
    at: datetime,
    *,
    pci: str | None = None,
    uuid: str | None = None,
    gpu_instance_id: int | None = None,
    skew_s: float = 0.0,
) -> GpuAttribution:
    """Which GPU a fault is about, from its PCI address or (NVML) UUID, valid at `at`."""
    pci = normalize_pci(pci)
    mig_uuid: str | None = None
    if uuid and uuid.startswith("MIG-"):
        mig_uuid, uuid = uuid, None
    snap = valid_at(history.inventories, at, skew_s)
    source_note = ""
    if snap is None and history.inventories:
        # GPU identities rarely change: the first inventory after the fault still names the card.
        snap = history.inventories[0]
        source_note = " (first inventory after the fault)"
    if snap is not None:
        for gpu in snap.gpus:
            gpu_pci = normalize_pci(gpu.pci_bus_id)
            mig_match = mig_uuid is not None and any(m.uuid == mig_uuid for m in gpu.mig_devices)
            if (uuid and gpu.uuid == uuid) or (pci and gpu_pci == pci) or mig_match:
                if mig_uuid is None and gpu_instance_id is not None:
                    mig_uuid = next((m.uuid for m in gpu.mig_devices if m.gpu_instance_id == gpu_instance_id), None)
                how = "MIG device" if mig_match else ("UUID" if uuid and gpu.uuid == uuid else "PCI address")
                return GpuAttribution(
                    uuid=gpu.uuid, serial=gpu.serial, pci=gpu_pci, index=gpu.index, name=gpu.name,
                    mig_uuid=mig_uuid, source="inventory",
                    reason=f"{how} matched GPU {gpu.index} of the NVML inventory of {snap.at.isoformat()}{source_note}",
                )
    if pci:
        ident = _identity(history, pci, at)
        if ident is not None:
            return GpuAttribution(
                uuid=ident.uuid or uuid, serial=ident.serial, pci=pci, index=None, name=None, mig_uuid=mig_uuid,
                source="kernel_identity", reason=f"kernel identity line for {pci} of {ident.at.isoformat()}",
            )
    if uuid or mig_uuid:
        return GpuAttribution(
            uuid=uuid, serial=None, pci=pci, index=None, name=None, mig_uuid=mig_uuid, source="event",
            reason="UUID from the NVML event; no inventory names this GPU",
        )
    return GpuAttribution(
        uuid=None, serial=None, pci=pci, index=None, name=None, mig_uuid=None, source=UNKNOWN,
        reason=f"no inventory or identity line names the GPU at PCI {pci}" if pci else "the fault names no GPU",
    )


def _identity(history: NodeHistory, pci: str, at: datetime) -> IdentityLine | None:
    """Merge the identity lines for `pci` (latest before `at` first, else any): UUID and serial."""
    lines = [i for i in history.identities if normalize_pci(i.pci) == pci]
    if not lines:
        return None
    before = [i for i in lines if i.at <= at] or lines
    uuid = next((i.uuid for i in reversed(before) if i.uuid), None) or next((i.uuid for i in lines if i.uuid), None)
    serial = next((i.serial for i in reversed(before) if i.serial), None) or next(
        (i.serial for i in lines if i.serial), None
    )
    return IdentityLine(at=before[-1].at, pci=pci, uuid=uuid, serial=serial)


def resolve_pod(
    history: NodeHistory, at: datetime, gpu: GpuAttribution, *, skew_s: float = 0.0, pod_uid: str | None = None
) -> PodAttribution:
    """The pod that held the GPU (or its MIG device) at `at`, from the PodResources history.

    When several pods share the GPU (time-slicing, MIG), `pod_uid` (the faulting process's pod, from
    its cgroup) picks the one whose UID it is (`pod_by_uid`)."""
    if gpu.uuid is None and gpu.mig_uuid is None:
        return PodAttribution(None, None, None, UNKNOWN, "the GPU is unknown, so its pod is too")
    snap = valid_at(history.pods, at, skew_s)
    if snap is None:
        return PodAttribution(None, None, None, UNKNOWN, "no PodResources snapshot at or before the fault")
    mig_uuids: set[str] = set()
    inv = valid_at(history.inventories, at, skew_s) or (history.inventories[0] if history.inventories else None)
    if inv is not None and gpu.uuid:
        for g in inv.gpus:
            if g.uuid == gpu.uuid:
                mig_uuids = {m.uuid for m in g.mig_devices}
    wanted = {gpu.mig_uuid} if gpu.mig_uuid else ({gpu.uuid} if gpu.uuid else set()) | mig_uuids
    hits = [a for a in snap.assignments if a.gpu_id in wanted or a.device_id in wanted]
    pods = sorted({(a.namespace, a.pod, a.container) for a in hits})
    if not pods:
        return PodAttribution(
            None, None, None, UNKNOWN,
            f"no pod held {gpu.mig_uuid or gpu.uuid} in the PodResources snapshot of {snap.at.isoformat()}",
        )
    if len(pods) == 1:
        ns, pod, container = pods[0]
        return PodAttribution(pod, ns, container, "podresources",
                              f"allocated to {ns}/{pod} ({container}) in the snapshot of {snap.at.isoformat()}")
    names = tuple(f"{ns}/{pod}/{c}" for ns, pod, c in pods)
    if pod_uid:
        chosen = pod_by_uid(history, snap, hits, pod_uid, at, skew_s)
        if chosen is not None:
            return chosen
    why = (f"the faulting process's pod UID {pod_uid} names none of them" if pod_uid
           else "no pod UID of the faulting process settles it")
    return PodAttribution(None, None, None, "ambiguous",
                          f"{len(pods)} containers shared the GPU (time-slicing or MIG): {', '.join(names)}; {why}",
                          candidates=names)


def pod_by_uid(
    history: NodeHistory, snap: PodSnapshot, hits: Sequence[DeviceAssignment], pod_uid: str, at: datetime,
    skew_s: float = 0.0,
) -> PodAttribution | None:
    """Which of the pods sharing a GPU (`hits`) has the UID `pod_uid`; None when that cannot be told.

    An assignment that carries its pod's UID says so directly. The kubelet's PodResources API names
    pods by namespace and name only, so otherwise the UID is learnt from the node itself: a pod that
    holds a GPU alone in `snap` owns the pod UIDs of the processes on that GPU (the process snapshot
    valid at `at`)."""
    direct = [a for a in hits if a.pod_uid == pod_uid]
    how = "the PodResources record carries its UID"
    if not direct:
        learnt = _uids_of_lone_pods(history, snap, at, skew_s).get(pod_uid)
        direct = [a for a in hits if (a.namespace, a.pod) == learnt[0]] if learnt else []
        how = f"its processes on {learnt[1]}, which it holds alone, run in that pod" if learnt else ""
    pods = sorted({(a.namespace, a.pod) for a in direct})
    if len(pods) != 1:
        return None
    (ns, pod), containers = pods[0], sorted({a.container for a in direct})
    container = containers[0] if len(containers) == 1 else None
    return PodAttribution(pod, ns, container, "pod_uid",
                          f"{len(set((a.namespace, a.pod) for a in hits))} pods shared the GPU; the faulting "
                          f"process's cgroup names pod UID {pod_uid}, which is {ns}/{pod} ({how})",
                          candidates=tuple(f"{a.namespace}/{a.pod}/{a.container}" for a in hits))


def _uids_of_lone_pods(
    history: NodeHistory, snap: PodSnapshot, at: datetime, skew_s: float
) -> dict[str, tuple[tuple[str, str], str]]:
    """Pod UID → ((namespace, pod), GPU) for pods that hold a GPU alone in `snap`, from the processes on it."""
    holders: dict[str, set[tuple[str, str]]] = {}
    for a in snap.assignments:
        holders.setdefault(a.gpu_id, set()).add((a.namespace, a.pod))
    procs = valid_at(history.processes, at, skew_s)
    out: dict[str, tuple[tuple[str, str], str]] = {}
    for proc in procs.processes if procs is not None else ():
        owners = holders.get(proc.gpu_uuid, set())
        if proc.pod_uid and len(owners) == 1:
            out.setdefault(proc.pod_uid, (next(iter(owners)), proc.gpu_uuid))
    return out


def resolve_process(
    history: NodeHistory,
    at: datetime,
    *,
    pid: int | None,
    process: str | None,
    gpu_uuid: str | None,
    skew_s: float = 0.0,
) -> ProcessAttribution:
    """The process behind a fault's pid, from the latest process snapshot at or before `at`."""
    if pid is None:
        return ProcessAttribution(None, process, None, None, UNKNOWN, "the fault names no process")
    for snap in reversed(history.processes):
        if snap.at > at + timedelta(seconds=skew_s):
            continue
        for proc in snap.processes:
            same_gpu = gpu_uuid is None or proc.gpu_uuid == gpu_uuid or proc.gpu_uuid.startswith("MIG-")
            if proc.pid == pid and same_gpu:
                why = f"pid {pid} on {proc.gpu_uuid} in the process snapshot of {snap.at.isoformat()}"
                return ProcessAttribution(pid, process, proc.container_id, proc.pod_uid, "snapshot", why)
        break  # only the snapshot valid at the fault counts
    if process:
        return ProcessAttribution(pid, process, None, None, "kernel_line", "process name from the fault line only")
    return ProcessAttribution(pid, None, None, None, UNKNOWN, f"pid {pid} is in no process snapshot at the fault")


def resolve_workload(history: NodeHistory, at: datetime, pod: PodAttribution, process: ProcessAttribution,
                     *, skew_s: float = 0.0) -> WorkloadAttribution:
    """The workload of the fault's pod: as the API server had it (the workload snapshots), else, for a
    pod no snapshot names (the API server no longer had it when the agent looked, or its node runs no
    workloads sensor), the pod's name without its generated suffixes: the last resort."""
    if pod.pod and pod.namespace:
        found = workload_at(history.workloads, at, pod.namespace, pod.pod, skew_s)
        if found is not None:
            snap, entry = found
            ref = entry.workload
            return WorkloadAttribution(ref.key, ref, "api", f"{ref.basis} (the API server's, in the workload "
                                                            f"snapshot of {snap.at.isoformat()})")
        return WorkloadAttribution(
            workload_name(pod.namespace, pod.pod, pod.container, process.process), None, "pod_name",
            f"no workload snapshot names {pod.namespace}/{pod.pod}: its name without generated suffixes")
    if process.process:
        return WorkloadAttribution(f"process:{process.process}", None, "process", "no pod: the process name")
    return WorkloadAttribution(None, None, UNKNOWN, "the fault names no pod or process")


def workload_at(snapshots: Sequence[WorkloadSnapshot], at: datetime, namespace: str, pod: str,
                skew_s: float = 0.0) -> tuple[WorkloadSnapshot, PodWorkload] | None:
    """The pod's entry in the snapshot valid at `at`; else in the nearest later one (a pod that faulted
    as it started, its snapshot read after the fault), else in the nearest earlier one (a pod the watch
    saw deleted before the kubelet let go of its GPU). A pod's workload does not change while it lives."""
    limit = at + timedelta(seconds=skew_s)
    valid = max((i for i, s in enumerate(snapshots) if s.at <= limit), default=-1)
    order = [*range(max(valid, 0), len(snapshots)), *range(valid - 1, -1, -1)]
    for i in order:
        for entry in snapshots[i].pods:
            if entry.pod == pod and entry.namespace == namespace:
                return snapshots[i], entry
    return None


def correlate(
    history: NodeHistory,
    at: datetime,
    *,
    pci: str | None = None,
    gpu_uuid: str | None = None,
    gpu_instance_id: int | None = None,
    pid: int | None = None,
    process: str | None = None,
    skew_s: float = 0.0,
) -> Attribution:
    """GPU, pod and process of one fault, joined with the state valid at `at`."""
    gpu = resolve_gpu(history, at, pci=pci, uuid=gpu_uuid, gpu_instance_id=gpu_instance_id, skew_s=skew_s)
    proc = resolve_process(history, at, pid=pid, process=process, gpu_uuid=gpu.uuid, skew_s=skew_s)
    pod = resolve_pod(history, at, gpu, skew_s=skew_s, pod_uid=proc.pod_uid)
    return Attribution(gpu, pod, proc, resolve_workload(history, at, pod, proc, skew_s=skew_s))


_POD_SUFFIXES = (
    re.compile(r"-[a-z0-9]{6,10}-[a-z0-9]{5}$"),  # Deployment: <name>-<replicaset hash>-<pod hash>
    re.compile(r"-[a-z0-9]{5}$"),  # Job, DaemonSet, ReplicaSet: <name>-<random>
    re.compile(r"-\d+$"),  # StatefulSet ordinal, indexed Job
)


def workload_name(namespace: str | None, pod: str | None, container: str | None, process: str | None,
                  owner: WorkloadRef | None = None) -> str | None:
    """The workload a fault belongs to: its owner's key (`namespace/Kind/name`, the API server's, from
    the workloads sensor) when known.

    The last resort, for a pod the API server no longer has (or a node without the sensor):
    `<namespace>/<pod without generated suffix>/<container>`, which joins the replicas and retries of
    one Deployment, Job or StatefulSet but not the pods of a JobSet or an Indexed Job (their names
    keep an index). When the pod is unknown, the process name stands in.
    """
    if owner is not None:
        return owner.key
    if pod:
        base = pod
        for rx in _POD_SUFFIXES:
            stripped = rx.sub("", base)
            if stripped and stripped != base:
                base = stripped
                break
        return f"{namespace or '?'}/{base}/{container or '?'}"
    if process:
        return f"process:{process}"
    return None
