"""The stream joins a fault with the node state of its event time, not of the time its line was read;
and settles a GPU shared by several pods with the faulting process's pod UID."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from models.node_records import GpuProcess, GpuProcesses, KernelLine, NodeRecord
from models.stream_policy import PipelinePolicy
from streams.store import Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, items_of, pci, pods, s, uuid

HOUR = timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = Store(f"sqlite:///{tmp_path / 'x.db'}", PipelinePolicy(quiet_period_s=600))
    st.create_schema()
    yield st
    st.dispose()


def test_a_backlog_read_an_hour_late_is_attributed_to_the_pods_of_the_faults_time(store: Store) -> None:
    k = Kmsg("late")
    # The fault happens while train-0 holds GPU 1; serve-0 takes the GPU over before the line is read.
    state: list[NodeRecord] = [inventory("late", T0), pods("late", T0 + s(1), {1: ("ml", "train-0", "main")}),
                               pods("late", T0 + HOUR, {1: ("web", "serve-0", "srv")})]
    read_late = k.xid(1, 13, T0 + HOUR + s(10), 4242, "python3")  # read (and stamped observed_at) late
    line = read_late.model_copy(update={"event_at": T0 + s(10), "boot_time": T0 - s(100)})
    store.process(items_of([*state, line]))
    (event,) = store_reads.fault_events(store)
    assert (event["namespace"], event["pod"]) == ("ml", "train-0")
    assert datetime.fromisoformat(event["occurred_at"]) == T0 + s(10)
    (inc,) = store_reads.incidents(store)
    assert inc["pods"] == ["ml/train-0/main"]

    # Read time as the fault's time would have named the pod that came later.
    k2 = Kmsg("late2")
    store.process(items_of([inventory("late2", T0), pods("late2", T0 + s(1), {1: ("ml", "train-0", "main")}),
                          pods("late2", T0 + HOUR, {1: ("web", "serve-0", "srv")}),
                          k2.xid(1, 13, T0 + HOUR + s(10), 4242, "python3")]))
    assert {e["pod"] for e in store_reads.fault_events(store) if e["node"] == "late2"} == {"serve-0"}


def test_a_raw_dmesg_line_is_placed_by_its_uptime_and_the_boot_time(store: Store) -> None:
    boot = T0 - s(30_000)
    line = KernelLine(node="dm", record_id="file:abc:0", source="file", fault=True, observed_at=T0 + 5 * HOUR,
                      message=f"[30010.000000] NVRM: Xid (PCI:{pci(0)[:-2]}): 13, pid=7, name=python3, "
                              "Graphics Exception", boot_time=boot)
    store.process(items_of([inventory("dm", T0), pods("dm", T0 + s(1), {0: ("ml", "train-0", "main")}),
                          pods("dm", T0 + 2 * HOUR, {0: ("ml", "other-0", "main")}), line]))
    (event,) = store_reads.fault_events(store)
    assert datetime.fromisoformat(event["occurred_at"]) == T0 + s(10)
    assert event["pod"] == "train-0"


def test_two_pods_sharing_a_gpu_are_told_apart_by_the_pod_uid_of_the_faulting_process(store: Store) -> None:
    node, k = "shared", Kmsg("shared")
    held = pods(node, T0, {0: ("ml", "a-0", "main"), 1: ("ml", "b-0", "main")})
    # Time-slicing: b-0 also got a replica of GPU 0, which a-0 holds too.
    replica = held.assignments[1].model_copy(update={"device_id": f"{uuid(node, 0)}::1", "gpu_id": uuid(node, 0),
                                                     "replica": 1})
    shared = held.model_copy(update={"assignments": (*held.assignments, replica)})
    uid_b = "0b0b0b0b-1111-4222-8333-444455556666"
    procs = GpuProcesses(node=node, record_id="procs:1", emitted_at=T0 + s(1), processes=(
        GpuProcess(gpu_uuid=uuid(node, 0), pid=100, pod_uid="0a0a0a0a-1111-4222-8333-444455556666"),
        GpuProcess(gpu_uuid=uuid(node, 0), pid=200, pod_uid=uid_b),
        GpuProcess(gpu_uuid=uuid(node, 1), pid=201, pod_uid=uid_b),  # b-0 alone on GPU 1: its UID is learnt
    ))
    store.process(items_of([inventory(node, T0), shared, procs, k.xid(0, 13, T0 + s(10), 200, "python3")]))
    (event,) = store_reads.fault_events(store)
    assert (event["namespace"], event["pod"]) == ("ml", "b-0")
    assert event["attribution"]["pod"]["source"] == "pod_uid"
    assert uid_b in event["attribution"]["pod"]["reason"]


def test_pods_assigned_before_the_history_span_still_attribute_a_fault(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / 'h.db'}", PipelinePolicy(history_s=3600))
    st.create_schema()
    try:
        k = Kmsg("long")  # a job that has held its GPU for longer than the history span
        st.process(items_of([inventory("long", T0), pods("long", T0 + s(1), {2: ("ml", "pretrain-0", "main")}),
                           k.xid(2, 13, T0 + 3 * HOUR, 7, "python3")]))
        (event,) = store_reads.fault_events(st)
        assert (event["gpu_uuid"], event["pod"]) == (uuid("long", 2), "pretrain-0")
    finally:
        st.dispose()
