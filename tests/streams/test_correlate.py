"""Correlation as pure functions: GPU, MIG, pod and process valid at the fault's time."""

from __future__ import annotations

from datetime import datetime

import pytest

from models.correlate import (
    IdentityLine,
    InventorySnapshot,
    NodeHistory,
    PodSnapshot,
    ProcessSnapshot,
    correlate,
    valid_at,
    workload_name,
)
from tests.streams.records import T0, inventory, pci, pods, processes, s, serial, uuid

NODE = "gpu-a"


def history(mig_on: int | None = None) -> NodeHistory:
    inv = inventory(NODE, T0, gpus=4, mig_on=mig_on)
    mig0 = f"MIG-{uuid(NODE, 2)[4:]}-0"
    p1 = pods(NODE, T0 + s(10), {0: ("ml", "train-abc12", "main"), 1: ("ml", "infer-7d9f8c6b5-x2k4p", "srv")})
    p2 = pods(NODE, T0 + s(100), {0: ("batch", "etl-0", "job"), 1: ("ml", "infer-7d9f8c6b5-x2k4p", "srv")},
              mig={mig0: ("lab", "notebook-0", "jupyter")} if mig_on == 2 else None)
    pr1 = processes(NODE, T0 + s(20), {4242: 0, 5151: 1})
    pr2 = processes(NODE, T0 + s(110), {7777: 0})
    return NodeHistory(
        NODE,
        inventories=[InventorySnapshot(inv.emitted_at, inv.gpus)],
        pods=[PodSnapshot(p.changed_at, p.assignments) for p in (p1, p2)],
        processes=[ProcessSnapshot(p.emitted_at, p.processes) for p in (pr1, pr2)],
    ).sort()


# (case, fault offset s, pci GPU index, uuid GPU index, pid) → (gpu index, pod, container, process source)
CASES = [
    ("pci joins inventory and the pod of that time", 25, 0, None, 4242, (0, "train-abc12", "main", "snapshot")),
    ("after the reschedule the GPU belongs to the next pod", 150, 0, None, 7777, (0, "etl-0", "job", "snapshot")),
    ("nvml uuid joins the same GPU", 150, None, 1, None, (1, "infer-7d9f8c6b5-x2k4p", "srv", "unknown")),
    ("fault before any pod snapshot: pod unknown", 5, 0, None, None, (0, None, None, "unknown")),
    ("pid of another time is not in the valid snapshot", 150, 0, None, 4242, (0, "etl-0", "job", "kernel_line")),
    ("GPU without any pod", 150, 3, None, None, (3, None, None, "unknown")),
]


@pytest.mark.parametrize(("offset", "pci_i", "uuid_i", "pid", "want"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_correlate_table(offset: float, pci_i: int | None, uuid_i: int | None, pid: int | None,
                         want: tuple[int, str | None, str | None, str]) -> None:
    h = history()
    at = T0 + s(offset)
    a = correlate(h, at, pci=pci(pci_i)[:-2] if pci_i is not None else None,
                  gpu_uuid=uuid(NODE, uuid_i) if uuid_i is not None else None, pid=pid, process="python3")
    gpu_i, pod, container, proc_source = want
    assert a.gpu.uuid == uuid(NODE, gpu_i)
    assert a.gpu.serial == serial(NODE, gpu_i)
    assert a.gpu.pci == pci(gpu_i)
    assert a.gpu.source == "inventory"
    assert a.pod.pod == pod
    assert a.pod.container == container
    assert (a.pod.source == "podresources") == (pod is not None)
    if pod is None:
        assert a.pod.source == "unknown" and a.pod.reason
    assert a.process.source == (proc_source if pid is not None else "unknown")


def test_clock_skew_lets_a_slightly_later_snapshot_count() -> None:
    h = history()
    at = T0 + s(99)  # the snapshot of T0+100 is one second after the fault
    assert correlate(h, at, pci=pci(0), skew_s=0).pod.pod == "train-abc12"
    assert correlate(h, at, pci=pci(0), skew_s=2).pod.pod == "etl-0"


def test_mig_device_maps_to_parent_and_its_pod() -> None:
    h = history(mig_on=2)
    mig0 = f"MIG-{uuid(NODE, 2)[4:]}-0"
    a = correlate(h, T0 + s(150), gpu_uuid=mig0)
    assert a.gpu.uuid == uuid(NODE, 2) and a.gpu.mig_uuid == mig0 and a.gpu.index == 2
    assert (a.pod.namespace, a.pod.pod, a.pod.container) == ("lab", "notebook-0", "jupyter")
    # The parent GPU plus the NVML GPU instance id picks the same MIG device.
    b = correlate(h, T0 + s(150), gpu_uuid=uuid(NODE, 2), gpu_instance_id=1)
    assert b.gpu.mig_uuid == mig0 and b.pod.pod == "notebook-0"


def test_kernel_identity_lines_when_no_inventory() -> None:
    h = NodeHistory(NODE, identities=[IdentityLine(T0, "0000:3b:00.0", "GPU-abc", None),
                                      IdentityLine(T0, "0000:3b:00.0", None, "1654923011263")])
    a = correlate(h, T0 + s(5), pci="0000:3b:00")
    assert (a.gpu.uuid, a.gpu.serial, a.gpu.source) == ("GPU-abc", "1654923011263", "kernel_identity")
    assert a.pod.source == "unknown"


def test_nothing_known_is_explicitly_unknown() -> None:
    a = correlate(NodeHistory(NODE), T0, pci="0000:99:00", pid=12, process=None)
    assert a.gpu.source == "unknown" and a.gpu.uuid is None and "0000:99:00.0" in a.gpu.reason
    assert a.pod.source == "unknown" and a.process.source == "unknown"
    assert a.to_dict()["workload"] is None


def test_shared_gpu_is_ambiguous_not_guessed() -> None:
    p = pods(NODE, T0, {0: ("a", "one-0", "c")})
    two = p.model_copy(update={"assignments": (*p.assignments, p.assignments[0].model_copy(
        update={"pod": "two-0", "device_id": f"{uuid(NODE, 0)}::1", "replica": 1}))})
    inv = inventory(NODE, T0)
    h = NodeHistory(NODE, inventories=[InventorySnapshot(T0, inv.gpus)], pods=[PodSnapshot(T0, two.assignments)])
    a = correlate(h, T0 + s(1), pci=pci(0))
    assert a.pod.source == "ambiguous" and a.pod.pod is None and len(a.pod.candidates) == 2


def test_valid_at_picks_latest_at_or_before() -> None:
    snaps = [PodSnapshot(T0 + s(i * 10), ()) for i in range(3)]
    assert valid_at(snaps, T0 - s(1)) is None
    assert valid_at(snaps, T0 + s(10)) is snaps[1]
    assert valid_at(snaps, T0 + s(19)) is snaps[1]
    assert valid_at(snaps, datetime.max.replace(tzinfo=T0.tzinfo)) is snaps[2]


@pytest.mark.parametrize(
    ("ns", "pod", "container", "process", "want"),
    [
        ("ml", "train-7d9f8c6b5-x2k4p", "main", None, "ml/train/main"),
        ("ml", "train-abc12", "main", None, "ml/train/main"),
        ("db", "pg-2", "postgres", None, "db/pg/postgres"),
        ("ml", "single", "c", None, "ml/single/c"),
        (None, None, None, "python3", "process:python3"),
        (None, None, None, None, None),
    ],
)
def test_workload_name(ns: str | None, pod: str | None, container: str | None, process: str | None,
                       want: str | None) -> None:
    assert workload_name(ns, pod, container, process) == want
