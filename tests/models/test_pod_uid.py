"""A GPU shared by several pods: the faulting process's pod UID (from its cgroup) says whose fault it is."""

from __future__ import annotations

from models.correlate import InventorySnapshot, NodeHistory, PodSnapshot, ProcessSnapshot, correlate
from models.node_records import DeviceAssignment, GpuProcess
from tests.streams.records import T0, inventory, pci, s, uuid

NODE = "ts"
UID_A, UID_B = "aaaaaaaa-0000-4000-8000-000000000001", "bbbbbbbb-0000-4000-8000-000000000002"


def _shared(uid_a: str | None = None, uid_b: str | None = None) -> tuple[DeviceAssignment, ...]:
    gpu = uuid(NODE, 0)
    return tuple(DeviceAssignment(device_id=f"{gpu}::{i}", gpu_id=gpu, replica=i, resource_name="nvidia.com/gpu",
                                  namespace="ml", pod=pod, container="main", pod_uid=uid)
                 for i, (pod, uid) in enumerate((("a-0", uid_a), ("b-0", uid_b))))


def _history(assignments: tuple[DeviceAssignment, ...], procs: tuple[GpuProcess, ...]) -> NodeHistory:
    return NodeHistory(NODE, inventories=[InventorySnapshot(T0, inventory(NODE, T0).gpus)],
                       pods=[PodSnapshot(T0, assignments)], processes=[ProcessSnapshot(T0, procs)])


def test_the_assignment_that_carries_the_uid_is_the_pod() -> None:
    h = _history(_shared(UID_A, UID_B), (GpuProcess(gpu_uuid=uuid(NODE, 0), pid=9, pod_uid=UID_A),))
    a = correlate(h, T0 + s(5), pci=pci(0), pid=9)
    assert (a.pod.source, a.pod.namespace, a.pod.pod, a.pod.container) == ("pod_uid", "ml", "a-0", "main")
    assert a.process.pod_uid == UID_A and len(a.pod.candidates) == 2


def test_without_uids_in_podresources_a_pod_alone_on_another_gpu_teaches_its_uid() -> None:
    alone = DeviceAssignment(device_id=uuid(NODE, 1), gpu_id=uuid(NODE, 1), resource_name="nvidia.com/gpu",
                             namespace="ml", pod="b-0", container="main")
    procs = (GpuProcess(gpu_uuid=uuid(NODE, 0), pid=9, pod_uid=UID_B),
             GpuProcess(gpu_uuid=uuid(NODE, 1), pid=10, pod_uid=UID_B))
    a = correlate(_history((*_shared(), alone), procs), T0 + s(5), pci=pci(0), pid=9)
    assert (a.pod.source, a.pod.pod) == ("pod_uid", "b-0")
    assert uuid(NODE, 1) in a.pod.reason


def test_a_uid_that_names_no_candidate_stays_ambiguous() -> None:
    procs = (GpuProcess(gpu_uuid=uuid(NODE, 0), pid=9, pod_uid="cccccccc-0000-4000-8000-000000000003"),)
    a = correlate(_history(_shared(UID_A, UID_B), procs), T0 + s(5), pci=pci(0), pid=9)
    assert a.pod.source == "ambiguous" and a.pod.pod is None and "names none of them" in a.pod.reason
    unknown = correlate(_history(_shared(), (GpuProcess(gpu_uuid=uuid(NODE, 0), pid=9),)), T0 + s(5),
                        pci=pci(0), pid=9)
    assert unknown.pod.source == "ambiguous" and "no pod UID" in unknown.pod.reason
