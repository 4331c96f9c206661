"""A short check against a real GPU and driver: inventory, supported event types, registration,
one event-wait timeout and MIG mode. Runs only where NVML finds a GPU (skipped elsewhere, CI
included). Standalone: `python -m pytest tests/gpu -s` prints a compact JSON summary."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from agents.metrics import Metrics
from agents.nvml_calls import NvmlCaller
from agents.signals.nvml.inventory import read_snapshot

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def nvml() -> Any:
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVML here: {exc}")
    if pynvml.nvmlDeviceGetCount() == 0:
        pynvml.nvmlShutdown()
        pytest.skip("NVML finds no GPU")
    yield pynvml
    pynvml.nvmlShutdown()


def test_real_nvml(nvml: Any) -> None:
    call = NvmlCaller(10.0, Metrics())
    snap = read_snapshot(nvml, call)
    assert snap.gpus, "NVML reported GPUs but none could be read"
    summary: dict[str, Any] = {
        "driver": snap.driver_version,
        "cuda_driver": snap.cuda_driver_version,
        "gpus": [],
    }
    wanted = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError | 0x4000 | 0x8000
    event_set = nvml.nvmlEventSetCreate()
    try:
        for gpu in snap.gpus:
            handle = snap.handles[gpu.uuid]
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
            entry: dict[str, Any] = {
                "uuid": gpu.uuid, "name": gpu.name, "bus": gpu.pci_bus_id, "serial": gpu.serial,
                "vbios": gpu.vbios_version, "inforom": gpu.inforom_versions, "numa": gpu.numa_node,
                "mig_mode": [gpu.mig_mode_current, gpu.mig_mode_pending], "mig_devices": len(gpu.mig_devices),
                "nvlink_active": sum(gpu.nvlink_active or ()), "remapped_rows": gpu.remapped_rows is not None,
                "power_limit_mw": gpu.power_limit_mw, "unsupported": list(gpu.unsupported),
                "supported_events": hex(supported),
            }
            try:
                nvml.nvmlDeviceRegisterEvents(handle, wanted & supported, event_set)
                entry["registered"] = hex(wanted & supported)
            except nvml.NVMLError as exc:
                entry["registered"] = f"error: {exc}"
            summary["gpus"].append(entry)
            assert gpu.uuid.startswith("GPU-") and gpu.pci_bus_id
            assert supported & nvml.nvmlEventTypeXidCriticalError
        began = time.monotonic()
        try:
            data = nvml.nvmlEventSetWait_v2(event_set, 500)
            summary["event_wait"] = {"event_type": hex(int(data.eventType)), "data": int(data.eventData)}
        except nvml.NVMLError_Timeout:
            summary["event_wait"] = f"timeout after {time.monotonic() - began:.2f} s"
    finally:
        nvml.nvmlEventSetFree(event_set)
    print("\n" + json.dumps(summary, separators=(",", ":")))
