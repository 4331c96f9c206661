"""`models.correlate.resolve_workload`: a fault's pod gets its workload from the workload snapshot valid
at the fault's time, else from the nearest later then earlier one that names the pod; the pod's name
only when no snapshot names it; the process name without a pod."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.correlate import (
    UNKNOWN,
    NodeHistory,
    PodAttribution,
    ProcessAttribution,
    WorkloadSnapshot,
    resolve_workload,
)
from models.node_records import PodWorkload
from models.workloads import BUILTIN_GROUPS, WorkloadRef

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def entry(pod: str, kind: str, name: str, ns: str = "ml") -> PodWorkload:
    return PodWorkload(namespace=ns, pod=pod, uid=f"uid-{pod}", workload=WorkloadRef(
        kind=kind, group=BUILTIN_GROUPS[kind], namespace=ns, name=name, how="owner", basis=f"owner {kind} {name}"))


HISTORY = NodeHistory("n1", workloads=[
    WorkloadSnapshot(T0, (entry("old-0", "Job", "gone"), entry("db-0", "StatefulSet", "db"))),
    WorkloadSnapshot(T0 + timedelta(minutes=10), (entry("db-0", "StatefulSet", "db"),)),
    WorkloadSnapshot(T0 + timedelta(minutes=20), (entry("db-0", "StatefulSet", "db"),
                                                  entry("new-0", "Job", "late"))),
])
PROC = ProcessAttribution(4242, "python", None, None, "snapshot", "")


def pod(name: str | None, ns: str | None = "ml") -> PodAttribution:
    return PodAttribution(name, ns if name else None, "main" if name else None, "podresources", "")


@pytest.mark.parametrize(("at_min", "name", "key", "source", "snapshot_min"), [
    (15, "db-0", "ml/StatefulSet/db", "api", 10),  # the snapshot valid at the fault
    (5, "db-0", "ml/StatefulSet/db", "api", 0),
    (15, "new-0", "ml/Job/late", "api", 20),  # only a later snapshot names it: it faulted as it started
    (15, "old-0", "ml/Job/gone", "api", 0),  # only an earlier one: deleted before the GPU was let go
    (-5, "db-0", "ml/StatefulSet/db", "api", 0),  # before every snapshot: the first that names it
    (15, "trainer-workers-0-3-k9d2x", "ml/trainer-workers-0-3/main", "pod_name", None),  # the last resort
])
def test_the_pods_workload(at_min: int, name: str, key: str, source: str, snapshot_min: int | None) -> None:
    got = resolve_workload(HISTORY, T0 + timedelta(minutes=at_min), pod(name), PROC)
    assert (got.name, got.source) == (key, source)
    if snapshot_min is None:
        assert got.ref is None and "no workload snapshot names" in got.reason
    else:
        assert got.ref is not None and (T0 + timedelta(minutes=snapshot_min)).isoformat() in got.reason


def test_without_a_pod_the_process_name_stands_in() -> None:
    got = resolve_workload(HISTORY, T0, pod(None), PROC)
    assert (got.name, got.source) == ("process:python", "process")
    nothing = resolve_workload(HISTORY, T0, pod(None), ProcessAttribution(None, None, None, None, UNKNOWN, ""))
    assert (nothing.name, nothing.source) == (None, UNKNOWN)


def test_a_pod_of_the_same_name_in_another_namespace_is_another_pod() -> None:
    got = resolve_workload(HISTORY, T0 + timedelta(minutes=15), pod("db-0", "other"), PROC)
    assert got.source == "pod_name" and got.name == "other/db/main"
