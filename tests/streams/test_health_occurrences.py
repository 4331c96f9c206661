"""One fault, one occurrence: a health signal joins the incident of the fault it belongs to and counts
once (the recovery action with its Xid 154, a pending remap with its Xid 63, a GPU count drop with
its Xid 79, a node's vanished GPUs with its driver that did not load), and a condition reported
again while it holds is stored once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from models.node_records import NodeRecord, RemappedRows
from models.signals.health.records import GpuHealth, HealthReading
from models.signals.kube_gpus.records import KubeGpuView
from models.signals.node_health.records import NodeGpuHealth
from models.stream_policy import PipelinePolicy
from streams.items import ItemMapper
from streams.store import BatchResult, Store
from tests.streams.records import T0, Kmsg, inventory, pci, s, uuid

NODE = "gpu-h-01"
PENDING = RemappedRows(correctable=0, uncorrectable=1, pending=True, failure=False)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    st = Store(db_url, PipelinePolicy(update_interval_s=0), cluster="c1")  # every change published
    st.create_schema()
    yield st
    st.dispose()


def feed(store: Store, *records: NodeRecord) -> BatchResult:
    mapper = ItemMapper(policy=store.policy)
    items = [i for r in records for i in mapper.items(r, "topic")]
    return store.process([*items, *mapper.flush_all()])


def incidents(results: list[BatchResult]) -> dict[str, dict[str, Any]]:
    """The latest state of every incident the results published, by id."""
    out: dict[str, dict[str, Any]] = {}
    for res in results:
        for o in res.outgoing:
            if o.stream == "incidents":
                out[o.payload["incident"]["incident_id"]] = o.payload["incident"]
    return out


def health(gpu: int, at: datetime, n: int, since: datetime, **reading: Any) -> GpuHealth:
    return GpuHealth(node=NODE, record_id=f"health:{gpu}:{n}", gpu_uuid=uuid(NODE, gpu),
                     pci_bus_id=f"0000{pci(gpu).upper()}", observed_at=at, emitted_at=at,
                     reading=HealthReading.model_validate(reading), since={k: since for k in reading} | {
                         "remap_pending": since, "recovery_action": since})


def test_a_pending_remap_joins_its_xid_63_and_its_heartbeats_are_stored_once(store: Store) -> None:
    k = Kmsg(NODE)
    t63 = T0 + s(5)
    results = [feed(store, inventory(NODE, T0),
                    k.xid(1, 63, t63, text="Row Remapper: New row marked for remapping, reset gpu to activate."))]
    results.append(feed(store, health(1, t63 + s(8), 1, t63 + s(8), remapped_rows=PENDING)))
    later = [health(1, t63 + s(600 * n), 1 + n, t63 + s(8), remapped_rows=PENDING) for n in range(1, 4)]
    results.append(feed(store, *later))  # heartbeats: the same condition, still pending
    [incident] = incidents(results).values()
    assert incident["count"] == 1
    assert incident["codes"] == ["Xid 63", "row_remap_pending"]
    assert incident["family"] == "memory"
    assert results[-1].duplicates == 3


def test_the_recovery_action_joins_its_xid_154(store: Store) -> None:
    k = Kmsg(NODE)
    t = T0 + s(10)
    results = [feed(store, inventory(NODE, T0), k.xid(0, 154, t, text="GPU recovery action changed from 0x0 (None) "
                                                                       "to 0x1 (GPU Reset Required)"))]
    results.append(feed(store, health(0, t + s(9), 1, t + s(9), recovery_action=1)))
    [incident] = incidents(results).values()
    assert (incident["count"], incident["codes"]) == (1, ["Xid 154", "recovery_action"])


def node_view(at: datetime, n: int, since: datetime, **fields: Any) -> NodeGpuHealth:
    return NodeGpuHealth(node=NODE, record_id=f"node-health:{n}", observed_at=at, emitted_at=at,
                         since={"gpu_count": since, "driver": since, "nvml": since}, **fields)


def test_a_gpu_count_drop_joins_the_xid_79_of_the_gpu_it_names(store: Store) -> None:
    k = Kmsg(NODE)
    t = T0 + s(30)
    results = [feed(store, inventory(NODE, T0), k.xid(2, 79, t, text="GPU has fallen off the bus."))]
    on_bus = tuple(pci(i) for i in range(4))
    results.append(feed(store, node_view(t + s(10), 1, t + s(10), nvml_count=3, pci_gpus=on_bus,
                                         nvml_gpus=tuple(a for a in on_bus if a != pci(2)), expected_count=4,
                                         expected_from="inventory")))
    [incident] = incidents(results).values()
    assert (incident["count"], incident["codes"], incident["gpu"]) == (1, ["Xid 79", "gpu_count"], uuid(NODE, 2))


def test_gpus_gone_from_every_side_and_the_driver_that_did_not_load_are_one_node_fault(store: Store) -> None:
    """Section 十六: after a kernel upgrade the module is not built for the running kernel; NVML, the
    cluster's allocatable and the device plugin all see the GPUs gone."""
    k = Kmsg(NODE)
    t = T0 + s(60)
    on_bus = tuple(pci(i) for i in range(8))
    results = [feed(store, k.line("NVRM: No NVIDIA GPU found.", t))]
    results.append(feed(store, node_view(
        t + s(12), 1, t + s(12), nvml="unavailable", nvml_error="DriverNotLoaded", pci_gpus=on_bus, expected_count=8,
        expected_from="inventory", kernel_release="6.8.0-49-generic", module_kernels=("6.8.0-45-generic",))))
    view = dict(node=NODE, capacity=8, allocatable=0, expected=8, plugin_pod="gpu-operator/nvidia-device-plugin-x",
                plugin_ready=False, plugin_restarts=4, plugin_waiting="CrashLoopBackOff")
    results.append(feed(store, KubeGpuView(record_id="kube:1", observed_at=t + s(40), emitted_at=t + s(40),
                                           since={"allocatable": t - s(100), "plugin": t + s(5)}, **view)))
    [incident] = incidents(results).values()
    assert incident["component"] == "node" and incident["count"] == 1
    assert incident["codes"] == ["driver_error", "driver_load", "gpu_allocatable", "device_plugin"]
    driver = [r for res in results for r in res.outgoing if r.stream == "incidents"]
    assert driver, "the node's incident is published"


def test_vanished_gpus_long_after_are_a_new_occurrence(store: Store) -> None:
    t = T0 + s(60)
    on_bus = tuple(pci(i) for i in range(8))
    first = node_view(t, 1, t, nvml="unavailable", nvml_error="DriverNotLoaded", pci_gpus=on_bus,
                      kernel_release="6.8.0-49-generic", module_kernels=("6.8.0-45-generic",))
    results = [feed(store, first)]
    view = KubeGpuView(node=NODE, record_id="kube:1", observed_at=t + s(900), emitted_at=t + s(900), capacity=8,
                       allocatable=4, since={"allocatable": t + s(700)})
    results.append(feed(store, view))
    [incident] = incidents(results).values()
    assert incident["count"] == 2


def test_nvml_unresponsive_is_a_fault_of_the_nodes_driver(store: Store) -> None:
    t = T0 + s(60)
    rec = node_view(t + s(31), 1, t, nvml="unresponsive", nvml_stuck=("nvmlDeviceGetFieldValues",),
                    pci_gpus=(pci(0),))
    [incident] = incidents([feed(store, rec)]).values()
    assert (incident["component"], incident["family"], incident["codes"]) == ("node", "driver",
                                                                              ["nvml_unresponsive"])
