"""A short check against a real GPU and driver: inventory, supported event types, registration,
one event-wait timeout and MIG mode; then every NVML call the health poller makes, with its value or
its NVML error, and one poll as the poller reads it (and what the checks find in it). Runs only where
NVML finds a GPU (skipped elsewhere, CI included). Standalone: `python -m pytest tests/gpu -s` prints
a compact JSON summary of each."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from agents.metrics import Metrics
from agents.nvml_calls import NvmlCaller
from agents.signals.health import host
from agents.signals.health.read import FIELDS, Reader
from agents.signals.nvml.inventory import read_snapshot
from models.signals.health import findings
from models.signals.health.tracker import GpuTracker
from models.stream_policy import HealthPolicy

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


def _raw(fn: Any, *args: Any) -> Any:
    """What one NVML call returns, or its error's name."""
    try:
        value = fn(*args)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, int | str | tuple) else repr(value)


def _calls(nvml: Any, handle: Any) -> dict[str, Any]:
    """Every NVML function the health poller uses, called directly on one GPU."""
    import ctypes

    fields = {int(v.fieldId): (int(v.nvmlReturn), int(v.value.ullVal))
              for v in nvml.nvmlDeviceGetFieldValues(handle, list(FIELDS))}
    fabric = nvml.c_nvmlGpuFabricInfo_v3_t()
    fabric_ret = _raw(nvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(fabric))
    return {
        "nvmlDeviceGetFieldValues": {fid: {"return": ret, "value": val} for fid, (ret, val) in fields.items()},
        "nvmlDeviceGetRemappedRows": _raw(nvml.nvmlDeviceGetRemappedRows, handle),
        "nvmlDeviceGetRetiredPages(dbe)": _raw(lambda: len(nvml.nvmlDeviceGetRetiredPages(
            handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))),
        "nvmlDeviceGetRetiredPagesPendingStatus": _raw(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle),
        "nvmlDeviceGetNvLinkState(0)": _raw(nvml.nvmlDeviceGetNvLinkState, handle, 0),
        "nvmlDeviceGetNvLinkErrorCounter(0, replay)": _raw(nvml.nvmlDeviceGetNvLinkErrorCounter, handle, 0,
                                                            nvml.NVML_NVLINK_ERROR_DL_REPLAY),
        "nvmlDeviceGetPcieReplayCounter": _raw(nvml.nvmlDeviceGetPcieReplayCounter, handle),
        "nvmlDeviceGetCurrPcieLinkGeneration": _raw(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "nvmlDeviceGetMaxPcieLinkGeneration": _raw(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "nvmlDeviceGetCurrPcieLinkWidth": _raw(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "nvmlDeviceGetMaxPcieLinkWidth": _raw(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "nvmlDeviceGetCurrentClocksEventReasons": _raw(
            lambda: hex(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))),
        "nvmlDeviceGetTemperatureV": _raw(nvml.nvmlDeviceGetTemperatureV, handle, nvml.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetMarginTemperature": _raw(nvml.nvmlDeviceGetMarginTemperature, handle),
        "nvmlDeviceGetTemperatureThreshold(slowdown)": _raw(nvml.nvmlDeviceGetTemperatureThreshold, handle,
                                                            nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "nvmlDeviceGetPowerUsage": _raw(nvml.nvmlDeviceGetPowerUsage, handle),
        "nvmlDeviceGetEnforcedPowerLimit": _raw(nvml.nvmlDeviceGetEnforcedPowerLimit, handle),
        "nvmlDeviceGetGpuFabricInfoV(v3)": fabric_ret if fabric_ret != 0 else
        {"state": int(fabric.state), "status": int(fabric.status), "health_summary": int(fabric.healthSummary)},
    }


def test_real_health_readings(nvml: Any) -> None:
    from datetime import UTC, datetime

    reader = Reader(nvml, NvmlCaller(10.0, Metrics()))
    summary: dict[str, Any] = {"kernel": host.kernel_release(), "driver_module": host.driver_version(Path("/proc")),
                               "pci_gpus": list(host.pci_gpus(Path("/sys"))), "lockdown": host.lockdown(Path("/sys")),
                               "gpus": []}
    for index in range(reader.count()):
        handle = reader.handle(index)
        static = reader.static(index, handle)
        began = time.monotonic()
        reading = reader.reading(static, handle)
        took = time.monotonic() - began
        record = GpuTracker("this-node", static.uuid, static.pci_bus_id, index).poll(reading, datetime.now(UTC))
        assert record is not None
        summary["gpus"].append({
            "uuid": static.uuid, "links": static.links, "poll_s": round(took, 4), "calls": _calls(nvml, handle),
            "reading": reading.model_dump(exclude_none=True), "stuck": reader.stuck,
            "findings": [f"{f.kind}: {f.message}" for f in findings(record, HealthPolicy())],
        })
        assert not reader.stuck, f"NVML calls timed out: {reader.stuck}"
        assert reading.temperature_c is not None and reading.pcie_width_max, "a data-centre GPU reports these"
    assert len(summary["pci_gpus"]) >= len(summary["gpus"]), "sysfs lists every GPU NVML does"
    print("\n" + json.dumps(summary, separators=(",", ":"), default=str))
