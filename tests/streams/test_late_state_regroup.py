"""Application faults read before the node state that names their pods group as if the state had been
read first: the GPU incidents they opened for want of a pod are merged into their workloads'
incidents, and a GPU that keeps faulting across workloads still takes them back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from models.node_records import NodeRecord
from models.stream_policy import PipelinePolicy
from streams.store import Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, items_of, pods, s


def fresh_store(url: str) -> Store:
    st = Store(url, PipelinePolicy(quiet_period_s=3600, fleet_min_nodes=10_000))
    st.create_schema()
    return st


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    st = fresh_store(db_url)
    yield st
    st.dispose()


def open_by_component(store: Store) -> dict[tuple[str, str], dict[str, Any]]:
    return {(i["component"], i["component_id"]): i for i in store_reads.incidents(store) if i["status"] == "open"}


def job_on_two_gpus(node: str) -> tuple[list[NodeRecord], list[NodeRecord]]:
    """A job whose two pods crash on GPUs 0 and 1 of `node`: (state, faults)."""
    k = Kmsg(node)
    state: list[NodeRecord] = [inventory(node, T0), pods(node, T0 + s(1), {
        0: ("vision", "resnet-train-0", "trainer"), 1: ("vision", "resnet-train-1", "trainer")})]
    faults: list[NodeRecord] = [k.xid(0, 13, T0 + s(10), 4100, "resnet_train"),
                                k.xid(0, 43, T0 + s(10.1), 4100, "resnet_train"),
                                k.xid(1, 31, T0 + s(70), 4200, "resnet_train")]
    return state, faults


def test_a_job_read_before_its_pods_is_one_workload_incident_as_in_the_other_order(store: Store) -> None:
    state, faults = job_on_two_gpus("late-1")
    store.process(items_of(faults))  # the kernel topic was read first
    assert {c for c, _ in open_by_component(store)} == {"gpu"}, "no pod known yet: each GPU's own incident"
    res = store.process(items_of(state))

    incidents = open_by_component(store)
    assert list(incidents) == [("workload", "vision/resnet-train/trainer")]
    job = incidents[("workload", "vision/resnet-train/trainer")]
    # the crash on GPU 1 a minute later is another report of the one on GPU 0, as in the other order
    assert job["category"] == "application" and job["count"] == 1 and job["gpu"] == "workload", job
    assert set(job["codes"]) == {"Xid 13", "Xid 43", "Xid 31"}
    assert job["pods"] == ["vision/resnet-train-0/trainer", "vision/resnet-train-1/trainer"]
    merged = [i for i in store_reads.incidents(store) if i["component"] == "gpu"]
    assert len(merged) == 2 and {i["merged_into"] for i in merged} == {job["incident_id"]}
    assert all(i["status"] == "resolved" and "read after them" in i["reason"] for i in merged)
    assert {e["incident_id"] for e in store_reads.fault_events(store)} == {job["incident_id"]}
    changes = sorted((o.payload["change"], o.payload["incident"]["component"]) for o in res.outgoing
                     if o.stream == "incidents")
    assert changes == [("opened", "workload"), ("resolved", "gpu"), ("resolved", "gpu")]


def test_both_read_orders_give_the_same_incidents(tmp_path: Path) -> None:
    state, faults = job_on_two_gpus("late-2")
    seen = []
    for name, order in (("state-first", [state, faults]), ("faults-first", [faults, state])):
        st = fresh_store(f"sqlite:///{tmp_path / name}.db")
        for records in order:
            st.process(items_of(records))
        fields = ("category", "gpu", "count", "codes", "pods", "processes", "workloads", "immediate_action",
                  "first_seen", "last_seen")
        seen.append({key: {f: i[f] for f in fields} for key, i in open_by_component(st).items()})
        st.dispose()
    assert seen[0] == seen[1] and len(seen[0]) == 1, seen


def test_a_gpu_that_fails_different_jobs_keeps_their_faults_whatever_the_order(store: Store) -> None:
    k = Kmsg("late-3")
    jobs = [("ml", f"job{j}-0", "main") for j in range(3)]
    state: list[NodeRecord] = [inventory("late-3", T0)]
    faults: list[NodeRecord] = []
    for j, job in enumerate(jobs):  # three jobs in turn on GPU 2, each crashing there only
        at = T0 + s(600 * j)
        state.append(pods("late-3", at, {2: job}))
        faults.append(k.xid(2, 13, at + s(60), 5000 + j, "python3"))
    store.process(items_of(faults))
    store.process(items_of(state))
    incidents = open_by_component(store)
    gpu = next(i for (c, _), i in incidents.items() if c == "gpu")
    assert gpu["category"] == "suspected_hardware" and gpu["count"] == 3, incidents
    assert not [c for c in incidents if c[0] == "workload"], incidents


def test_a_hardware_incident_keeps_its_application_faults(store: Store) -> None:
    k = Kmsg("late-4")
    faults: list[NodeRecord] = [k.xid(0, 13, T0 + s(10), 4100, "trainer"), k.xid(0, 48, T0 + s(20)),
                                k.xid(0, 63, T0 + s(21))]
    store.process(items_of(faults))
    (before,) = open_by_component(store).values()
    assert before["family"] == "memory"
    store.process(items_of([inventory("late-4", T0), pods("late-4", T0 + s(1), {0: ("ml", "train-0", "main")})]))
    (after,) = open_by_component(store).values()
    assert after["incident_id"] == before["incident_id"] and after["component"] == "gpu"
    assert after["pods"] == ["ml/train-0/main"] and len(store_reads.fault_events(store)) == 3


def test_the_sample_cluster_read_state_last_gives_the_incidents_of_state_first(tmp_path: Path) -> None:
    from importlib import resources

    from models.node_records import GpuInventory, GpuProcesses, PodAssignments
    from xidpipe.replay.layout import open_cluster_dir
    from xidpipe.replay.records import ClusterRecords

    records = list(ClusterRecords(open_cluster_dir(Path(str(resources.files("xidpipe") / "samples" / "cluster")))))
    state = [r for r in records if isinstance(r, GpuInventory | GpuProcesses | PodAssignments)]
    rest = [r for r in records if r not in state]
    assert state and rest
    seen = []
    for name, order in (("state-first", state + rest), ("state-last", rest + state)):
        st = fresh_store(f"sqlite:///{tmp_path / name}.db")
        for i in range(0, len(order), 200):
            st.process(items_of(order[i:i + 200]))
        seen.append(sorted((i["node"], i["component"], i["component_id"], i["category"], i["count"], i["pods"])
                           for i in store_reads.incidents(st) if i["status"] == "open"))
        st.dispose()
    assert seen[0] == seen[1], seen
    assert ("gpu-node-01", "workload", "team-vision/resnet-train/trainer") in [i[:3] for i in seen[1]]
