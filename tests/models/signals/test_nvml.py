"""The NVML signals' mapping: which NVML records report a fault, as what, and how the registry routes them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from models import signals
from models.catalog import load_catalog
from models.node_records import NVML_TOPIC
from models.signals.nvml.mapping import observation_from_missing, observation_from_nvml
from models.signals.nvml.records import GpuMissing, NvmlEvent
from models.vocabulary import FAMILIES

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
GPU = "GPU-0b6d3bf1-6a53-4b34-9e1f-6b1a7f5a0c01"
BUS = "00000000:3B:00.0"


def event(event_type: str, data: int = 0, xid: int | None = None) -> NvmlEvent:
    return NvmlEvent(node="n1", record_id=f"nvml:{event_type}:{data}", gpu_uuid=GPU, pci_bus_id=BUS,
                     event_type=event_type,  # type: ignore[arg-type]
                     event_type_mask=0, event_data=data, xid=xid, gpu_instance_id=2, observed_at=T0)


@pytest.mark.parametrize(("xid", "family"), [(48, "memory"), (79, "gpu_lost"), (13, "application"), (119, "gsp")])
def test_a_critical_xid_carries_its_catalog_entry(xid: int, family: str) -> None:
    info = load_catalog().xid(xid)
    assert info is not None
    obs = observation_from_nvml(event("xid_critical", xid, xid))
    assert obs is not None
    assert (obs.kind, obs.xid, obs.family, obs.source) == ("xid", xid, family, "nvml")
    assert (obs.category, obs.mnemonic, obs.immediate_action) == (info.category, info.mnemonic, info.immediate_action)
    assert (obs.node, obs.gpu_uuid, obs.pci, obs.gpu_instance_id, obs.occurred_at) == ("n1", GPU, BUS, 2, T0)
    assert obs.catalog_version == load_catalog().version


def test_an_xid_the_catalog_does_not_know_is_still_a_fault() -> None:
    obs = observation_from_nvml(event("xid_critical", 9999, 9999))
    assert obs is not None
    assert (obs.family, obs.category, obs.message, obs.immediate_action) == ("other", "unknown", "Xid 9999", None)


@pytest.mark.parametrize(("event_type", "kind", "family", "category"), [
    ("double_bit_ecc", "ecc", "memory", "hardware"),
    ("gpu_unavailable", "gpu_fallen_off_bus", "gpu_lost", "hardware"),
    ("recovery_action", "driver_error", "recovery_action", "driver"),
])
def test_device_faults(event_type: str, kind: str, family: str, category: str) -> None:
    obs = observation_from_nvml(event(event_type, 2))
    assert obs is not None
    assert (obs.kind, obs.family, obs.category) == (kind, family, category)
    assert family in FAMILIES


def test_a_recovery_action_says_which() -> None:
    obs = observation_from_nvml(event("recovery_action", 3))
    assert obs is not None and obs.details == {"recovery_action_new": 3} and "3" in obs.message


@pytest.mark.parametrize("event_type", ["single_bit_ecc", "mig_config_change", "other"])
def test_events_that_are_not_faults_report_nothing(event_type: str) -> None:
    assert observation_from_nvml(event(event_type, 1)) is None
    assert signals.observations(event(event_type, 1)) == ()


def test_a_critical_event_without_an_xid_reports_nothing() -> None:
    assert observation_from_nvml(event("xid_critical", 0, None)) is None


def test_a_missing_gpu_is_lost() -> None:
    rec = GpuMissing(node="n1", record_id="gpu-missing:count_dropped", reason="count_dropped", expected_count=8,
                     observed_count=7, observed_at=T0)
    obs = observation_from_missing(rec)
    assert (obs.kind, obs.family, obs.category, obs.occurred_at) == ("gpu_missing", "gpu_lost", "hardware", T0)
    assert "7/8" in obs.message and obs.raw == rec.model_dump_json()


def test_the_registry_routes_nvml_records_through_their_mapping() -> None:
    for kind in ("nvml_event", "gpu_missing"):
        signal = signals.signal_for(kind)
        assert signal is not None and signal.topic == NVML_TOPIC
    rec = event("double_bit_ecc")
    assert signals.observations(rec) == (observation_from_nvml(rec),)
