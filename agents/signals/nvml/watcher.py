"""The NVML side path: inventory and processes published when they change (and periodically),
fault events from an NVML event set, and "GPU missing" when a GPU is lost or the count drops.

Everything here runs in its own threads, and every NVML call other than the event wait goes
through the NVML caller the agent lends (`agents.nvml_calls.NvmlCaller`: timeouts), so nothing here
can hold up the kernel-log path. Without the NVML library the side path logs that once and stays off.

Built from its `SensorContext` (`agents.signals.base`): it publishes its records, reports the GPUs
it read (`ctx.gpus`: the kernel path's pre-filter and evidence collector use them) and triggers
evidence for the fault events (`ctx.evidence`); its times come from `ctx.clock`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.evidence import FaultContext
from agents.nvml_calls import NvmlCallTimeout
from agents.signals.base import SensorContext
from agents.signals.nvml.cgroup import container_of
from agents.signals.nvml.inventory import Snapshot, pci_upstream, read_snapshot
from models.node_records import GpuInfo, GpuInventory, GpuProcess, GpuProcesses
from models.pci import normalize_pci
from models.signals.nvml.records import GpuMissing, NvmlEvent, NvmlEventType

log = logging.getLogger(__name__)

NO_MIG_ID = 0xFFFFFFFF
FAULT_EVENT_TYPES = ("xid_critical", "double_bit_ecc", "gpu_unavailable", "recovery_action")


def event_type_name(mask: int) -> NvmlEventType:
    if mask & 0x8:
        return "xid_critical"
    if mask & 0x2:
        return "double_bit_ecc"
    if mask & 0x4000:
        return "gpu_unavailable"
    if mask & 0x8000:
        return "recovery_action"
    if mask & 0x1:
        return "single_bit_ecc"
    if mask & 0x100:
        return "mig_config_change"
    return "other"


@dataclass(frozen=True, slots=True)
class NvmlSettings:
    """The NVML sensor's own settings (`AgentSettings`: `nvml_event_wait_ms`, `inventory_interval_s`,
    `inventory_check_s`, `processes_interval_s`, `proc_root`, `sysfs_root`); the call timeout is the
    NVML caller's (`nvml_call_timeout_s`)."""

    event_wait_ms: int = 1000
    inventory_interval_s: float = 300.0
    inventory_check_s: float = 30.0
    processes_interval_s: float = 10.0
    proc_root: Path = Path("/proc")
    sysfs_root: Path = Path("/sys")


class NvmlWatcher:
    def __init__(self, ctx: SensorContext[NvmlSettings]) -> None:
        settings = ctx.settings
        self.node = ctx.node
        self._publish = ctx.publish
        self._metrics = ctx.metrics
        self._clock = ctx.clock
        self.call = ctx.nvml
        self._report_gpus = ctx.gpus
        self._trigger_evidence = ctx.evidence
        self._event_wait_ms = settings.event_wait_ms
        self._inventory_interval = settings.inventory_interval_s
        self._inventory_check = settings.inventory_check_s
        self._processes_interval = settings.processes_interval_s
        self._proc_root = settings.proc_root
        self._sysfs_root = settings.sysfs_root
        self._nv: Any = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._snapshot: Snapshot | None = None
        self._max_count = 0
        self._reported_lost: set[str] = set()
        self._previous_gpus: dict[int, GpuInfo] = {}
        self._last_inventory: tuple[Any, ...] | None = None
        self._last_inventory_at = 0.0
        self._last_processes: tuple[Any, ...] | None = None
        self._events_ready = threading.Event()
        self.available = False

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        t = threading.Thread(target=self._main, name="nvml", daemon=True)
        t.start()
        self._threads.append(t)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=self.call.timeout_s + self._event_wait_ms / 1000 + 1)

    def _init(self) -> bool:
        try:
            import pynvml
        except ImportError:
            log.warning("nvidia-ml-py is not installed: NVML is off, the kernel-log path runs alone")
            return False
        self._nv = pynvml
        try:
            self.call(pynvml.nvmlInit)
        except pynvml.NVMLError_LibraryNotFound:
            log.warning("NVML library (libnvidia-ml.so.1) not found: NVML is off, the kernel-log path runs alone")
            return False
        except (pynvml.NVMLError, NvmlCallTimeout) as exc:
            log.warning("NVML did not initialise: NVML is off, the kernel-log path runs alone",
                        extra={"error": str(exc)})
            return False
        self.available = True
        self._metrics.set("xidpipe_agent_nvml_available", 1.0)
        return True

    def _main(self) -> None:
        if not self._init():
            return
        try:
            self._poll_inventory(force=True)
            events = threading.Thread(target=self._event_loop, name="nvml-events", daemon=True)
            events.start()
            self._threads.append(events)
            self._events_ready.wait(self.call.timeout_s * 4)
            next_inventory = self._clock.monotonic() + self._inventory_check
            next_processes = self._clock.monotonic()
            while not self._stop.is_set():
                now = self._clock.monotonic()
                if now >= next_processes:
                    self._poll_processes()
                    next_processes = now + self._processes_interval
                if now >= next_inventory:
                    self._poll_inventory()
                    next_inventory = now + self._inventory_check
                self._stop.wait(max(0.05, min(next_processes, next_inventory) - self._clock.monotonic()))
        except Exception:
            log.exception("NVML side path failed; the kernel-log path continues")
        finally:
            if self.available:
                try:
                    self.call(self._nv.nvmlShutdown, timeout_s=2)
                except Exception:
                    log.debug("nvmlShutdown failed", exc_info=True)

    # --- inventory ------------------------------------------------------------------------
    def _poll_inventory(self, force: bool = False) -> None:
        nv = self._nv
        try:
            snap = read_snapshot(nv, self.call)
        except (nv.NVMLError, NvmlCallTimeout) as exc:
            log.warning("NVML inventory read failed", extra={"error": str(exc)})
            return
        self._snapshot = snap
        self._check_missing(snap)
        # Each GPU with its upstream bridges (sysfs, root port first): a root port's AER report is the GPU's below.
        paths = {g.uuid: pci_upstream(g.pci_bus_id, self._sysfs_root) for g in snap.gpus}
        gpus = tuple(g.model_copy(update={"upstream_bridges": tuple(paths[g.uuid][1:])}) for g in snap.gpus)
        key = (snap.driver_version, snap.cuda_driver_version, tuple(g.model_dump_json() for g in gpus))
        due = self._clock.monotonic() - self._last_inventory_at >= self._inventory_interval
        if force or due or key != self._last_inventory:
            self._publish(GpuInventory(
                node=self.node,
                record_id=f"inventory:{self._clock.time_ns()}",
                driver_version=snap.driver_version,
                cuda_driver_version=snap.cuda_driver_version,
                gpus=gpus,
            ))
            self._last_inventory, self._last_inventory_at = key, self._clock.monotonic()
            self._report_gpus(gpus, [a for g in gpus for a in paths[g.uuid]])

    def _check_missing(self, snap: Snapshot) -> None:
        prev = self._previous_gpus
        for index in snap.lost:
            gpu = prev.get(index)
            uuid = gpu.uuid if gpu else None
            tag = uuid or f"index:{index}"
            if tag in self._reported_lost:
                continue
            self._reported_lost.add(tag)
            self._missing("gpu_lost", uuid=uuid, bus=gpu.pci_bus_id if gpu else None)
        if self._max_count and snap.count < self._max_count:
            tag = f"count:{snap.count}"
            if tag not in self._reported_lost:
                self._reported_lost.add(tag)
                present = {g.uuid for g in snap.gpus}
                gone = [g for g in prev.values() if g.uuid not in present]
                self._missing("count_dropped", uuid=gone[0].uuid if len(gone) == 1 else None,
                              bus=gone[0].pci_bus_id if len(gone) == 1 else None,
                              expected=self._max_count, observed=snap.count)
        self._max_count = max(self._max_count, snap.count)
        for gpu in snap.gpus:
            self._previous_gpus[gpu.index] = gpu

    def _missing(self, reason: str, *, uuid: str | None, bus: str | None, expected: int | None = None,
                 observed: int | None = None) -> None:
        log.error("GPU missing", extra={"reason": reason, "gpu_uuid": uuid, "pci_bus_id": bus,
                                        "expected": expected, "observed": observed})
        self._publish(GpuMissing(
            node=self.node, record_id=f"gpu-missing:{reason}:{uuid or bus or observed}:{self._clock.time_ns()}",
            reason=reason,  # type: ignore[arg-type]
            gpu_uuid=uuid, pci_bus_id=bus, expected_count=expected, observed_count=observed,
            observed_at=self._clock.now(),
        ))

    # --- processes ------------------------------------------------------------------------
    def _poll_processes(self) -> None:
        nv = self._nv
        snap = self._snapshot
        if snap is None:
            return
        found: list[GpuProcess] = []
        for uuid, handle in snap.handles.items():
            try:
                procs = self.call(nv.nvmlDeviceGetComputeRunningProcesses, handle)
            except (nv.NVMLError, NvmlCallTimeout) as exc:
                log.debug("process list failed", extra={"gpu_uuid": uuid, "error": str(exc)})
                continue
            for p in procs:
                container, pod = container_of(int(p.pid), self._proc_root)
                gi = getattr(p, "gpuInstanceId", NO_MIG_ID)
                ci = getattr(p, "computeInstanceId", NO_MIG_ID)
                mem = getattr(p, "usedGpuMemory", None)
                found.append(GpuProcess(
                    gpu_uuid=uuid, pid=int(p.pid), used_memory_bytes=int(mem) if isinstance(mem, int) else None,
                    gpu_instance_id=None if gi in (None, NO_MIG_ID) else gi,
                    compute_instance_id=None if ci in (None, NO_MIG_ID) else ci,
                    container_id=container, pod_uid=pod,
                ))
        key = tuple(sorted((p.gpu_uuid, p.pid, p.container_id or "") for p in found))
        if key != self._last_processes:
            self._last_processes = key
            self._publish(GpuProcesses(node=self.node, record_id=f"processes:{self._clock.time_ns()}",
                                       processes=tuple(found)))

    # --- events ---------------------------------------------------------------------------
    def _event_loop(self) -> None:
        nv = self._nv
        try:
            event_set = self.call(nv.nvmlEventSetCreate)
            wanted = (nv.nvmlEventTypeXidCriticalError | nv.nvmlEventTypeDoubleBitEccError
                      | getattr(nv, "nvmlEventTypeGpuUnavailableError", 0x4000)
                      | getattr(nv, "nvmlEventTypeGpuRecoveryAction", 0x8000))
            registered = self._register(event_set, wanted)
        except (nv.NVMLError, NvmlCallTimeout) as exc:
            log.warning("NVML events unavailable", extra={"error": str(exc)})
            self._events_ready.set()
            return
        finally:
            self._events_ready.set()
        log.info("NVML events registered", extra={"gpus": registered})
        try:
            while not self._stop.is_set():
                try:
                    data = nv.nvmlEventSetWait_v2(event_set, self._event_wait_ms)
                except nv.NVMLError_Timeout:
                    continue
                except nv.NVMLError_GpuIsLost:
                    log.error("NVML event wait: a GPU is lost")
                    self._poll_inventory()
                    continue
                except nv.NVMLError as exc:
                    log.warning("NVML event wait failed", extra={"error": str(exc)})
                    self._stop.wait(1.0)
                    continue
                self._on_event(data)
        finally:
            try:
                self.call(nv.nvmlEventSetFree, event_set, timeout_s=2)
            except Exception:
                log.debug("nvmlEventSetFree failed", exc_info=True)

    def _register(self, event_set: Any, wanted: int) -> int:
        nv = self._nv
        snap = self._snapshot
        registered = 0
        for uuid, handle in (snap.handles.items() if snap else []):
            try:
                supported = self.call(nv.nvmlDeviceGetSupportedEventTypes, handle)
                mask = wanted & int(supported)
                if mask:
                    self.call(nv.nvmlDeviceRegisterEvents, handle, mask, event_set)
                    registered += 1
            except (nv.NVMLError, NvmlCallTimeout) as exc:
                log.warning("NVML event registration failed", extra={"gpu_uuid": uuid, "error": str(exc)})
        return registered

    def _on_event(self, data: Any) -> None:
        self._metrics.inc("xidpipe_agent_nvml_events_total")
        uuid = bus = None
        snap = self._snapshot
        for gpu in snap.gpus if snap else []:
            handle = snap.handles.get(gpu.uuid) if snap else None
            if handle is not None and _same_handle(handle, data.device):
                uuid, bus = gpu.uuid, gpu.pci_bus_id
        mask = int(data.eventType)
        kind = event_type_name(mask)
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        event = NvmlEvent(
            node=self.node,
            record_id=f"nvml:{uuid}:{mask}:{int(data.eventData)}:{self._clock.time_ns()}",
            gpu_uuid=uuid,
            pci_bus_id=bus,
            event_type=kind,
            event_type_mask=mask,
            event_data=int(data.eventData),
            xid=int(data.eventData) if kind == "xid_critical" else None,
            gpu_instance_id=None if gi == NO_MIG_ID else gi,
            compute_instance_id=None if ci == NO_MIG_ID else ci,
            observed_at=self._clock.now(),
        )
        log.warning("NVML event", extra={"event_type": kind, "gpu_uuid": uuid, "xid": event.xid,
                                         "gpu_instance_id": event.gpu_instance_id})
        self._publish(event)
        if kind in FAULT_EVENT_TYPES:
            self._trigger_evidence(FaultContext(event.record_id, normalize_pci(bus), uuid, event.xid, None))


def _same_handle(a: Any, b: Any) -> bool:
    """NVML device handles are pointers: compare their addresses."""
    import ctypes

    def address(h: Any) -> int | None:
        try:
            return ctypes.cast(h, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            return None

    return address(a) == address(b) and address(a) is not None
