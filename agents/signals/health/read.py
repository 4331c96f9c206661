"""One GPU's health through NVML: every call through the agent's NVML caller (a timeout each), a
reading a GPU does not support (NVML_ERROR_NOT_SUPPORTED, a missing symbol) remembered and not asked
again. This module is the health poller's NVML adapter: the only one of it that imports pynvml.

Per poll: the field values (the recovery action, ECC counts, retired pages, NVLink error totals,
PCIe replays: one call), the remapped rows, the state of each NVLink the GPU has, the PCIe link's
generation and width, the clock-event reasons, the temperature and its slowdown margin, the power
draw and the fabric state. The maxima (link generation and width, the slowdown temperature, the
power limit) and the GPU's links are read when the GPU is first seen and at each refresh; the
NVLink counters per link only after a total changed, to name the link.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.nvml_calls import NvmlCaller, NvmlCallTimeout
from models.node_records import EccCounts, RemappedRows
from models.signals.health.records import HealthReading, LinkReading, NvlinkErrors

log = logging.getLogger(__name__)

MAX_LINKS = 18  # NVLink links per GPU on current parts (H100/H200/B200: 18)

# NVML field ids (nvml.h)
FI_RECOVERY_ACTION = 230
FI_ECC = {"volatile_corrected": 3, "volatile_uncorrected": 4, "aggregate_corrected": 5, "aggregate_uncorrected": 6}
FI_RETIRED_SBE, FI_RETIRED_DBE, FI_RETIRED_PENDING = 29, 30, 31
FI_NVLINK = {"crc_flit": 38, "crc_data": 45, "replay": 52, "recovery": 59}
FI_PCIE_REPLAY = 94
FIELDS = (FI_RECOVERY_ACTION, *FI_ECC.values(), FI_RETIRED_SBE, FI_RETIRED_DBE, FI_RETIRED_PENDING,
          *FI_NVLINK.values(), FI_PCIE_REPLAY)


def load() -> Any:
    """nvidia-ml-py's module (ImportError when it is not installed)."""
    import pynvml

    return pynvml


class Unresponsive(Exception):
    """An NVML call timed out (or was not made: its function or NVML is stuck); names the call."""


@dataclass(slots=True)
class GpuStatic:
    """What rarely changes, read at first sight and at each refresh."""

    uuid: str
    pci_bus_id: str | None
    index: int
    links: int = 0
    gen_max: int | None = None
    width_max: int | None = None
    slowdown_c: int | None = None
    power_limit_mw: int | None = None
    unsupported: set[str] = field(default_factory=set)
    link_errors: dict[int, LinkReading] = field(default_factory=dict)  # the last per-link counters read
    totals: NvlinkErrors | None = None


class Reader:
    """Reads GPUs through `call`; `stuck` collects the calls that timed out during a poll."""

    def __init__(self, nv: Any, call: NvmlCaller) -> None:
        self.nv = nv
        self.call = call
        self.stuck: list[str] = []

    def _get(self, st: GpuStatic | None, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` through the caller; None when the GPU does not support it (remembered on `st`) or
        when the call timed out (named in `stuck`: one hung reading leaves the others). A call without
        a GPU's static (`st` None: the count, a handle, the identity) raises `Unresponsive` instead."""
        nv = self.nv
        if st is not None and name in st.unsupported:
            return None
        try:
            return self.call(fn, *args)
        except NvmlCallTimeout:
            self.stuck.append(getattr(fn, "__name__", name))
            if st is None:
                raise Unresponsive(name) from None
            return None
        except (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound):
            if st is not None:
                st.unsupported.add(name)
            return None
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError as exc:  # this reading failed this time (a link not trained, ...): the others go on
            if st is None:
                raise
            log.debug("NVML reading failed", extra={"gpu_uuid": st.uuid, "reading": name, "error": str(exc)})
            return None

    # --- the node ---------------------------------------------------------------------------------
    def count(self) -> int:
        return int(self._get(None, "count", self.nv.nvmlDeviceGetCount))

    def handle(self, index: int) -> Any:
        return self._get(None, "handle", self.nv.nvmlDeviceGetHandleByIndex, index)

    def static(self, index: int, handle: Any, previous: GpuStatic | None = None) -> GpuStatic:
        nv = self.nv
        uuid = _text(self._get(None, "uuid", nv.nvmlDeviceGetUUID, handle))
        pci = self._get(None, "pci", nv.nvmlDeviceGetPciInfo_v3, handle)
        st = GpuStatic(uuid, _text(pci.busId) if pci is not None else None, index)
        if previous is not None and previous.uuid == uuid:
            st.link_errors, st.totals = previous.link_errors, previous.totals
        st.gen_max = self._get(st, "gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration, handle)
        st.width_max = self._get(st, "width_max", nv.nvmlDeviceGetMaxPcieLinkWidth, handle)
        st.slowdown_c = self._get(st, "slowdown_c", nv.nvmlDeviceGetTemperatureThreshold, handle,
                                  nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        st.power_limit_mw = self._get(st, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        st.links = self._links(st, handle)
        return st

    def _links(self, st: GpuStatic, handle: Any) -> int:
        nv = self.nv
        for link in range(MAX_LINKS):
            try:
                self.call(nv.nvmlDeviceGetNvLinkState, handle, link)
            except NvmlCallTimeout:
                self.stuck.append("nvmlDeviceGetNvLinkState")
                return link
            except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument, nv.NVMLError_FunctionNotFound):
                return link
        return MAX_LINKS

    # --- one poll of one GPU ------------------------------------------------------------------------
    def reading(self, st: GpuStatic, handle: Any) -> HealthReading:
        nv = self.nv
        values = self._fields(st, handle)
        rows = self._get(st, "remapped_rows", nv.nvmlDeviceGetRemappedRows, handle)
        totals = _nvlink_totals(values) if st.links else None
        links = self._link_states(st, handle, totals)
        reasons = self._get(st, "reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
        temperature = self._get(st, "temperature", nv.nvmlDeviceGetTemperatureV, handle, nv.NVML_TEMPERATURE_GPU)
        margin = self._get(st, "margin", nv.nvmlDeviceGetMarginTemperature, handle)
        fabric = self._fabric(st, handle)
        ecc = {k: values.get(v) for k, v in FI_ECC.items()}
        retired = values.get(FI_RETIRED_PENDING)
        return HealthReading(
            recovery_action=values.get(FI_RECOVERY_ACTION),
            remapped_rows=RemappedRows(correctable=rows[0], uncorrectable=rows[1], pending=bool(rows[2]),
                                       failure=bool(rows[3])) if rows is not None else None,
            retired_sbe=values.get(FI_RETIRED_SBE), retired_dbe=values.get(FI_RETIRED_DBE),
            retired_pending=None if retired is None else bool(retired),
            ecc=EccCounts(**ecc) if any(v is not None for v in ecc.values()) else None,
            nvlinks=links, nvlink_errors=totals, pcie_replays=values.get(FI_PCIE_REPLAY),
            pcie_gen=self._get(st, "pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
            pcie_gen_max=st.gen_max,
            pcie_width=self._get(st, "pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
            pcie_width_max=st.width_max, clocks_event_reasons=reasons, temperature_c=temperature,
            temperature_slowdown_c=st.slowdown_c, slowdown_margin_c=margin,
            power_mw=self._get(st, "power", nv.nvmlDeviceGetPowerUsage, handle), power_limit_mw=st.power_limit_mw,
            fabric_state=fabric[0], fabric_status=fabric[1], fabric_health=fabric[2],
            unsupported=tuple(sorted(st.unsupported)),
        )

    def _fields(self, st: GpuStatic, handle: Any) -> dict[int, int]:
        """The field values NVML has for this GPU, by field id (the ones it does not support left out)."""
        raw = self._get(st, "field_values", self.nv.nvmlDeviceGetFieldValues, handle, list(FIELDS))
        out: dict[int, int] = {}
        for v in raw or ():
            if int(v.nvmlReturn) == 0:
                out[int(v.fieldId)] = _value(v)
        return out

    def _link_states(self, st: GpuStatic, handle: Any, totals: NvlinkErrors | None) -> tuple[LinkReading, ...]:
        nv = self.nv
        if not st.links:
            return ()
        if totals is not None and totals != st.totals:
            self._link_errors(st, handle)
            st.totals = totals
        out = []
        for link in range(st.links):
            state = self._get(st, f"nvlink{link}", nv.nvmlDeviceGetNvLinkState, handle, link)
            if state is None:
                continue
            known = st.link_errors.get(link)
            active = state == nv.NVML_FEATURE_ENABLED
            out.append(known.model_copy(update={"active": active}) if known else LinkReading(link=link, active=active))
        return tuple(out)

    def _link_errors(self, st: GpuStatic, handle: Any) -> None:
        nv = self.nv
        counters = {"replay": nv.NVML_NVLINK_ERROR_DL_REPLAY, "recovery": nv.NVML_NVLINK_ERROR_DL_RECOVERY,
                    "crc_flit": nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, "crc_data": nv.NVML_NVLINK_ERROR_DL_CRC_DATA}
        for link in range(st.links):
            values = {k: self._get(st, f"nvlink_errors_{k}", nv.nvmlDeviceGetNvLinkErrorCounter, handle, link, c)
                      for k, c in counters.items()}
            st.link_errors[link] = LinkReading(link=link, active=True, **values)

    def _fabric(self, st: GpuStatic, handle: Any) -> tuple[int | None, int | None, int | None]:
        nv = self.nv
        if "fabric" in st.unsupported:
            return None, None, None
        info = nv.c_nvmlGpuFabricInfo_v3_t()
        if self._get(st, "fabric", nv.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info)) is None:
            return None, None, None
        return int(info.state), int(info.status), int(info.healthSummary)


def _nvlink_totals(values: dict[int, int]) -> NvlinkErrors | None:
    got = {k: values.get(v) for k, v in FI_NVLINK.items()}
    return NvlinkErrors(**got) if any(v is not None for v in got.values()) else None


def _value(v: Any) -> int:
    """A field value as an integer, by its type (NVML_VALUE_TYPE_*)."""
    kind = int(v.valueType)
    union = v.value
    return int({0: union.dVal, 1: union.uiVal, 2: union.ulVal, 3: union.ullVal, 4: union.sllVal, 5: union.siVal,
                6: union.usVal}.get(kind, union.ullVal))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def error_name(exc: BaseException) -> str:
    """NVML's error as its pynvml class names it, without the prefix (DriverNotLoaded, LibraryNotFound)."""
    return type(exc).__name__.removeprefix("NVMLError_")
