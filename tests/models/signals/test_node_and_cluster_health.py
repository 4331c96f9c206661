"""The node's GPUs as a whole (`models.signals.node_health`) and the cluster's view of them
(`models.signals.kube_gpus`): each check fires on its condition, just over its threshold, and says why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from models.signals import observations
from models.signals.kube_gpus.records import KubeGpuView
from models.signals.node_health.records import NodeGpuHealth
from models.vocabulary import Family, ImmediateAction

T0 = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)
BUS = tuple(f"0000:{0x18 + 0x10 * i:02x}:00.0" for i in range(8))


def node(held_s: float = 0, **fields: Any) -> NodeGpuHealth:
    base: dict[str, Any] = dict(nvml="ok", nvml_count=8, nvml_gpus=BUS, pci_gpus=BUS, expected_count=8,
                                expected_from="inventory", kernel_release="6.8.0-49-generic",
                                driver_version="550.54.15", module_kernels=("6.8.0-49-generic",))
    base.update(fields)
    return NodeGpuHealth(node="gpu-n-3", record_id="r", observed_at=T0 + timedelta(seconds=held_s),
                         since={"nvml": T0, "gpu_count": T0, "driver": T0}, **base)


def kinds(rec: NodeGpuHealth | KubeGpuView) -> list[str]:
    return [o.kind for o in observations(rec) or ()]


def test_a_healthy_node_reports_nothing() -> None:
    assert kinds(node()) == []


@pytest.mark.parametrize(("held", "fault"), [(29, False), (30, True)])
def test_nvml_unresponsive_for_thirty_seconds(held: float, fault: bool) -> None:
    obs = observations(node(held, nvml="unresponsive", nvml_stuck=("nvmlDeviceGetFieldValues",))) or ()
    assert bool(obs) is fault
    if fault:
        [o] = obs
        assert (o.family, o.immediate_action, o.pci) == (Family.DRIVER, ImmediateAction.RESTART_BM, None)
        assert "nvmlDeviceGetFieldValues" in o.message


def test_gpus_that_left_the_bus_against_the_expected_count() -> None:
    [o] = observations(node(nvml_count=7, nvml_gpus=BUS[:7], pci_gpus=BUS[:7])) or ()
    assert (o.kind, o.family, o.pci) == ("gpu_count", Family.GPU_LOST, None)
    assert "7 of 8 GPUs on the PCI bus (expected from the inventory)" in o.message


def test_a_gpu_on_the_bus_the_driver_lost_is_that_gpus_fault() -> None:
    [o] = observations(node(nvml_count=7, nvml_gpus=BUS[:3] + BUS[4:])) or ()
    assert (o.kind, o.pci) == ("gpu_count", BUS[3])


def test_without_sysfs_the_nvml_count_against_the_expected_one() -> None:
    assert kinds(node(nvml_count=6, nvml_gpus=(), pci_gpus=())) == ["gpu_count"]
    assert kinds(node(nvml_count=8, nvml_gpus=(), pci_gpus=())) == []


@pytest.mark.parametrize(("fields", "says"), [
    ({"module_kernels": ("6.8.0-45-generic",)},
     "built for 6.8.0-45-generic but the node runs 6.8.0-49-generic"),
    ({"lockdown": "integrity", "module_signed": False}, "lockdown (integrity, Secure Boot) refuses the unsigned"),
    ({"module_kernels": ()}, "no nvidia kernel module is installed"),
    ({}, "is not loaded on 6.8.0-49-generic"),
])
def test_a_driver_that_did_not_load_says_which_kernel_and_driver_disagree(fields: dict[str, Any], says: str) -> None:
    rec = node(nvml="unavailable", nvml_error="DriverNotLoaded", nvml_count=None, nvml_gpus=(), driver_version=None,
               **fields)
    [o] = observations(rec) or ()
    assert (o.kind, o.family, o.immediate_action) == ("driver_load", Family.DRIVER, ImmediateAction.UPDATE_SWFW)
    assert says in o.message and "8 NVIDIA GPUs on the PCI bus" in o.message


def test_a_library_that_disagrees_with_the_loaded_module() -> None:
    [o] = observations(node(nvml="unavailable", nvml_error="LibRmVersionMismatch", nvml_count=None)) or ()
    assert "the kernel module 550.54.15 is loaded" in o.message


def test_no_driver_fault_without_gpus_on_the_bus_or_with_nvml_answering() -> None:
    assert kinds(node(nvml="unavailable", nvml_error="LibraryNotFound", pci_gpus=(), driver_version=None)) == []
    assert kinds(node(driver_version=None)) == []  # NVML answers: the module is loaded, its version file unread


def view(held_s: float = 0, **fields: Any) -> KubeGpuView:
    base: dict[str, Any] = dict(capacity=8, allocatable=8, expected=8, plugin_pod="gpu-operator/dp-1",
                                plugin_ready=True, plugin_restarts=0)
    base.update(fields)
    return KubeGpuView(node="gpu-n-3", record_id="k", observed_at=T0 + timedelta(seconds=held_s),
                       since={"allocatable": T0, "plugin": T0}, **base)


@pytest.mark.parametrize(("held", "fields", "fault"), [
    (300, {}, False),
    (119, {"allocatable": 7}, False),
    (120, {"allocatable": 7}, True),
    (120, {"capacity": 7, "allocatable": 7}, True),  # the plugin lists 7 of the 8 the labels name
    (120, {"capacity": 7, "allocatable": 7, "expected": None}, False),
    (600, {"allocatable": 0, "node_ready": False}, False),  # a node not Ready offers nothing: not this fault
])
def test_allocatable_below_capacity_or_expected(held: float, fields: dict[str, Any], fault: bool) -> None:
    assert ("gpu_allocatable" in kinds(view(held, **fields))) is fault


@pytest.mark.parametrize(("held", "fields", "fault"), [
    (0, {"plugin_ready": False, "plugin_waiting": "CrashLoopBackOff", "plugin_restarts": 5}, True),
    (119, {"plugin_ready": False}, False),
    (120, {"plugin_ready": False}, True),
    (600, {"plugin_ready": True, "plugin_restarts": 3}, False),
    (600, {"plugin_pod": None, "plugin_ready": None}, False),
])
def test_the_device_plugin_crash_looping_or_not_ready(held: float, fields: dict[str, Any], fault: bool) -> None:
    obs = [o for o in observations(view(held, **fields)) or () if o.kind == "device_plugin"]
    assert bool(obs) is fault
    assert all(o.source == "kube" and o.family == Family.DRIVER for o in obs)


def test_the_node_tracker_publishes_changes_heartbeats_and_a_wrong_view_while_it_is_new() -> None:
    from models.signals.node_health.tracker import REPEAT_WRONG_S, NodeTracker

    tracker = NodeTracker("gpu-n-3", heartbeat_s=600)
    ok = dict(nvml="ok", nvml_error=None, nvml_count=8, nvml_gpus=BUS, pci_gpus=BUS, expected_count=8)
    at = [T0 + timedelta(seconds=10 * i) for i in range(400)]
    published = [i for i in range(120) if tracker.observe(ok, at[i]) is not None]
    assert published == [0, 60]  # the first view, then the heartbeat
    hung = {**ok, "nvml": "unresponsive", "nvml_stuck": ("nvmlDeviceGetFieldValues",)}
    got = [(i, r) for i in range(120, 400) if (r := tracker.observe(hung, at[i])) is not None]
    repeats = [i for i, _ in got if (at[i] - at[120]).total_seconds() <= REPEAT_WRONG_S]
    assert repeats == list(range(120, 151))  # every poll while it is new: a grace period sees it held
    assert [i for i, _ in got if i > 150] == [210, 270, 330, 390]  # then at the heartbeat again
    assert all(r.since["nvml"] == at[120] for _, r in got)
    [fault] = [o for _, r in got[:4] for o in observations(r) or ()]  # 30 s after it began
    assert fault.kind == "nvml_unresponsive" and fault.occurred_at == at[123]
