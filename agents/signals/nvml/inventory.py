"""Read the GPU inventory through NVML. Every field tolerates NVMLError_NotSupported (and a
missing symbol, and a timeout): it is then None and named in `unsupported`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.nvml_calls import NvmlCaller, NvmlCallTimeout
from models.node_records import EccCounts, GpuInfo, MigDevice, RemappedRows
from models.pci import normalize_pci

log = logging.getLogger(__name__)

NVLINK_MAX_LINKS = 36


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class Snapshot:
    driver_version: str | None = None
    cuda_driver_version: int | None = None
    gpus: list[GpuInfo] = field(default_factory=list)
    handles: dict[str, Any] = field(default_factory=dict)  # GPU UUID -> handle
    lost: list[int] = field(default_factory=list)  # indexes answering GPU_IS_LOST
    count: int = 0


class _Fields:
    """Collects one GPU's fields, noting the unsupported ones."""

    def __init__(self, nv: Any, call: NvmlCaller) -> None:
        self.nv = nv
        self.call = call
        self.unsupported: list[str] = []

    def get(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        nv = self.nv
        try:
            return self.call(fn, *args)
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound, nv.NVMLError_InvalidArgument,
                nv.NVMLError_NotFound, NvmlCallTimeout):
            if name not in self.unsupported:
                self.unsupported.append(name)
            return None


def read_snapshot(nv: Any, call: NvmlCaller) -> Snapshot:
    snap = Snapshot()
    top = _Fields(nv, call)
    raw_driver = top.get("driver_version", nv.nvmlSystemGetDriverVersion)
    snap.driver_version = _text(raw_driver) if raw_driver is not None else None
    snap.cuda_driver_version = top.get("cuda_driver_version", nv.nvmlSystemGetCudaDriverVersion)
    snap.count = int(call(nv.nvmlDeviceGetCount))
    for index in range(snap.count):
        try:
            handle = call(nv.nvmlDeviceGetHandleByIndex, index)
            info = read_gpu(nv, call, index, handle)
        except nv.NVMLError_GpuIsLost:
            snap.lost.append(index)
            continue
        snap.gpus.append(info)
        snap.handles[info.uuid] = handle
    return snap


def read_gpu(nv: Any, call: NvmlCaller, index: int, handle: Any) -> GpuInfo:
    f = _Fields(nv, call)
    uuid = _text(call(nv.nvmlDeviceGetUUID, handle))
    pci = call(nv.nvmlDeviceGetPciInfo_v3, handle)
    serial = f.get("serial", nv.nvmlDeviceGetSerial, handle)
    minor = f.get("minor_number", nv.nvmlDeviceGetMinorNumber, handle)
    name = f.get("name", nv.nvmlDeviceGetName, handle)
    vbios = f.get("vbios_version", nv.nvmlDeviceGetVbiosVersion, handle)
    inforom: dict[str, str] = {}
    for label, obj in (("oem", nv.NVML_INFOROM_OEM), ("ecc", nv.NVML_INFOROM_ECC), ("power", nv.NVML_INFOROM_POWER)):
        value = f.get(f"inforom_{label}", nv.nvmlDeviceGetInforomVersion, handle, obj)
        if value is not None:
            inforom[label] = _text(value)
    image = f.get("inforom_image", nv.nvmlDeviceGetInforomImageVersion, handle)
    if image is not None:
        inforom["image"] = _text(image)
    mig = f.get("mig_mode", nv.nvmlDeviceGetMigMode, handle)
    mig_devices: list[MigDevice] = []
    if mig is not None and mig[0] == nv.NVML_DEVICE_MIG_ENABLE:
        mig_devices = _mig_devices(nv, call, f, handle)
    numa = f.get("numa_node", nv.nvmlDeviceGetNumaNodeId, handle)
    nvlink = _nvlinks(nv, call, f, handle)
    ecc = EccCounts(
        volatile_corrected=f.get("ecc", nv.nvmlDeviceGetTotalEccErrors, handle,
                                 nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
        volatile_uncorrected=f.get("ecc", nv.nvmlDeviceGetTotalEccErrors, handle,
                                   nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
        aggregate_corrected=f.get("ecc", nv.nvmlDeviceGetTotalEccErrors, handle,
                                  nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
        aggregate_uncorrected=f.get("ecc", nv.nvmlDeviceGetTotalEccErrors, handle,
                                    nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
    )
    remap = f.get("remapped_rows", nv.nvmlDeviceGetRemappedRows, handle)
    return GpuInfo(
        index=index,
        uuid=uuid,
        pci_bus_id=_text(pci.busId),
        minor_number=int(minor) if minor is not None else None,
        serial=_text(serial) if serial is not None else None,
        name=_text(name) if name is not None else None,
        vbios_version=_text(vbios) if vbios is not None else None,
        inforom_versions=inforom,
        mig_mode_current=mig[0] if mig is not None else None,
        mig_mode_pending=mig[1] if mig is not None else None,
        mig_devices=tuple(mig_devices),
        numa_node=numa,
        nvlink_active=nvlink,
        ecc=None if "ecc" in f.unsupported else ecc,
        remapped_rows=RemappedRows(correctable=remap[0], uncorrectable=remap[1], pending=bool(remap[2]),
                                   failure=bool(remap[3])) if remap is not None else None,
        power_limit_mw=f.get("power_limit", nv.nvmlDeviceGetPowerManagementLimit, handle),
        enforced_power_limit_mw=f.get("enforced_power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle),
        temperature_shutdown_c=f.get("temperature_shutdown", nv.nvmlDeviceGetTemperatureThreshold, handle,
                                     nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        temperature_slowdown_c=f.get("temperature_slowdown", nv.nvmlDeviceGetTemperatureThreshold, handle,
                                     nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        unsupported=tuple(f.unsupported),
    )


def _mig_devices(nv: Any, call: NvmlCaller, f: _Fields, handle: Any) -> list[MigDevice]:
    out: list[MigDevice] = []
    count = f.get("mig_devices", nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    for i in range(count):
        try:
            mig = call(nv.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
        except (nv.NVMLError_NotFound, nv.NVMLError_InvalidArgument, nv.NVMLError_NotSupported):
            continue
        out.append(MigDevice(
            uuid=_text(call(nv.nvmlDeviceGetUUID, mig)),
            index=i,
            gpu_instance_id=f.get("mig_gpu_instance_id", nv.nvmlDeviceGetGpuInstanceId, mig),
            compute_instance_id=f.get("mig_compute_instance_id", nv.nvmlDeviceGetComputeInstanceId, mig),
        ))
    return out


def _nvlinks(nv: Any, call: NvmlCaller, f: _Fields, handle: Any) -> tuple[bool, ...] | None:
    states: list[bool] = []
    for link in range(NVLINK_MAX_LINKS):
        try:
            states.append(call(nv.nvmlDeviceGetNvLinkState, handle, link) == nv.NVML_FEATURE_ENABLED)
        except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument, nv.NVMLError_FunctionNotFound):
            break
        except NvmlCallTimeout:
            f.unsupported.append("nvlink")
            return None
    if not states:
        f.unsupported.append("nvlink")
        return None
    return tuple(states)


def pci_upstream(bus_id: str, sysfs_root: Any) -> list[str]:
    """The GPU's address and its upstream bridges (root port, switches) from sysfs."""
    from pathlib import Path

    bdf = normalize_pci(bus_id)
    if bdf is None:
        return []
    out = [bdf]
    try:
        real = (Path(sysfs_root) / "bus" / "pci" / "devices" / bdf).resolve(strict=True)
    except OSError:
        return out
    for part in real.parts:
        if part.count(":") == 2 and "." in part:
            norm = normalize_pci(part)
            if norm and norm not in out:
                out.append(norm)
    return out
