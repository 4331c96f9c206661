"""The GPU health poller: every `interval_s`, in a thread of its own, each GPU's health through NVML
and the node's view of its GPUs and driver, into `GpuHealth` and `NodeGpuHealth` records.

Every NVML call goes through the agent's NVML caller (`ctx.nvml`: a timeout each), so a hung driver
never stalls the poller: the calls that timed out are named in the node's record as NVML being
unresponsive, a fault of the node's driver (`models.signals.node_health.nvml_stall`), and the
agent runs on. Without NVML (the driver not loaded, the library missing) the node's record says why,
with what the node shows of its GPUs and its driver (`agents.signals.health.host`).

The records are built by the pure trackers (`models.signals.health.tracker`,
`models.signals.node_health.tracker`): published on a change, after a minute with activity, and at
the heartbeat, never per poll.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.signals.base import SensorContext
from agents.signals.health import host
from agents.signals.health.read import GpuStatic, Reader, Unresponsive, error_name, load
from agents.statefile import read_json, write_json_atomic
from models.pci import normalize_pci
from models.signals.health.tracker import GpuTracker
from models.signals.node_health.tracker import NodeTracker

log = logging.getLogger(__name__)

REFRESH_S = 600.0  # GPUs' maxima and links, and the PCI bus, are read again this often


@dataclass(frozen=True, slots=True)
class HealthSettings:
    """The poller's own settings (`AgentSettings`: `health_interval_s`, `health_heartbeat_s`,
    `expected_gpus`, `proc_root`, `sysfs_root`, `modules_root`, `state_dir`)."""

    interval_s: float = 10.0
    heartbeat_s: float = 600.0
    expected_gpus: int | None = None
    proc_root: Path = Path("/proc")
    sysfs_root: Path = Path("/sys")
    modules_root: Path = Path("/lib/modules")
    state_file: Path | None = None  # the most GPUs seen on this node, kept across restarts and reboots


class HealthPoller:
    def __init__(self, ctx: SensorContext[HealthSettings]) -> None:
        self._ctx = ctx
        self.settings = ctx.settings
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._nv: Any = None
        self._reader: Reader | None = None
        self._nvml_error: str | None = None
        self._gpus: dict[int, GpuStatic] = {}
        self._handles: dict[int, Any] = {}
        self._trackers: dict[str, GpuTracker] = {}
        self._node = NodeTracker(ctx.node, ctx.settings.heartbeat_s)
        self._refreshed = -1e18
        self._bus: tuple[str, ...] = ()
        self._last_count: int | None = None
        self._seen_most = self._load_seen()
        self.polls = 0

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="gpu-health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._ctx.nvml.timeout_s + 2)

    def _run(self) -> None:
        clock = self._ctx.clock
        while not self._stop.is_set():
            began = clock.monotonic()
            try:
                self.poll_once(clock.now())
            except Exception:
                log.exception("GPU health poll failed; the next one runs at its time")
            self._stop.wait(max(0.0, self.settings.interval_s - (clock.monotonic() - began)))

    # --- one poll ---------------------------------------------------------------------------------
    def poll_once(self, now: datetime) -> None:
        """Read every GPU and the node's view once, publish what the trackers say is due."""
        self.polls += 1
        self._ctx.metrics.inc("xidpipe_agent_health_polls_total")
        reader = self._ensure_nvml()
        if reader is not None:
            reader.stuck = []
        fields: dict[str, Any] = {"nvml": "unavailable" if reader is None else "ok", "nvml_error": self._nvml_error}
        if reader is None and self._nvml_error == "NvmlCallTimeout":  # nvmlInit itself hangs
            fields.update(nvml="unresponsive", nvml_stuck=("nvmlInit",))
        refresh = self._ctx.clock.monotonic() - self._refreshed >= REFRESH_S
        count: int | None = None
        if reader is not None:
            try:
                count = self._poll_gpus(reader, now, refresh)
            except Unresponsive:
                fields["nvml"] = "unresponsive"
            except self._nv.NVMLError as exc:  # the count or a handle failed outright: NVML is not usable now
                fields.update(nvml="unavailable", nvml_error=error_name(exc))
            if reader.stuck:
                fields["nvml"] = "unresponsive"
                fields["nvml_stuck"] = tuple(dict.fromkeys(reader.stuck))
        if refresh or count != self._last_count:  # the bus again when NVML's count moved
            self._bus = host.pci_gpus(self.settings.sysfs_root)
            self._refreshed = self._ctx.clock.monotonic()
        self._last_count = count
        fields.update(self._node_view(count, reader is None))
        record = self._node.observe(fields, now)
        if record is not None:
            self._publish(record)

    def _publish(self, record: Any) -> None:
        self._ctx.metrics.inc("xidpipe_agent_health_records_total")
        self._ctx.publish(record)

    def _ensure_nvml(self) -> Reader | None:
        if self._reader is not None:
            return self._reader
        try:
            self._nv = self._nv or load()
        except ImportError:
            self._nvml_error = "NotInstalled"
            return None
        try:
            self._ctx.nvml(self._nv.nvmlInit)
        except Exception as exc:  # NVMLError_* (DriverNotLoaded, LibraryNotFound, ...) or a timeout
            name = error_name(exc)
            if name != self._nvml_error:
                log.warning("NVML is not available to the health poller: %s", name, extra={"error": str(exc)})
            self._nvml_error = name
            return None
        self._nvml_error = None
        self._reader = Reader(self._nv, self._ctx.nvml)
        return self._reader

    def _poll_gpus(self, reader: Reader, now: datetime, refresh: bool) -> int:
        nv = self._nv
        count = reader.count()
        if count != len(self._handles) or refresh:
            self._handles = {}
        for index in range(count):
            try:
                handle = self._handles.get(index)
                if handle is None:
                    handle = self._handles[index] = reader.handle(index)
                st = self._gpus.get(index)
                if st is None or refresh:
                    st = self._gpus[index] = reader.static(index, handle, st)
                reading = reader.reading(st, handle)
            except nv.NVMLError_GpuIsLost:
                self._gpus.pop(index, None)
                self._handles.pop(index, None)
                continue  # the NVML sensor reports the lost GPU; the node's count says it too
            except Unresponsive:
                continue  # its identity did not come back in time: named in the node's record
            tracker = self._trackers.get(st.uuid)
            if tracker is None:
                tracker = self._trackers[st.uuid] = GpuTracker(self._ctx.node, st.uuid, normalize_pci(st.pci_bus_id),
                                                               index, self.settings.heartbeat_s)
            record = tracker.poll(reading, now)
            if record is not None:
                self._publish(record)
        for index in [i for i in self._gpus if i >= count]:
            del self._gpus[index]
        return count

    # --- the node's view --------------------------------------------------------------------------
    def _node_view(self, count: int | None, nvml_down: bool) -> dict[str, Any]:
        s = self.settings
        kernel = host.kernel_release()
        reachable = tuple(a for g in self._gpus.values() if (a := normalize_pci(g.pci_bus_id)))
        if count is not None and len(reachable) == count:
            self._note_seen(count)
        expected, source = (s.expected_gpus, "setting") if s.expected_gpus is not None else (
            (self._seen_most, "inventory") if self._seen_most else (None, None))
        view: dict[str, Any] = {
            "nvml_count": count, "nvml_gpus": reachable if count is not None else (), "pci_gpus": self._bus,
            "expected_count": expected, "expected_from": source, "kernel_release": kernel,
            "driver_version": host.driver_version(s.proc_root), "lockdown": host.lockdown(s.sysfs_root),
        }
        if nvml_down:  # where is the driver? (only read when it does not answer)
            mods = host.modules(s.modules_root, kernel)
            view.update(module_kernels=mods.kernels, module_signed=mods.signed)
        return view

    def _load_seen(self) -> int:
        path = self.settings.state_file
        data = read_json(path) if path is not None else None
        value = data.get("gpus_seen_most") if isinstance(data, dict) else None
        return value if isinstance(value, int) and value >= 0 else 0

    def _note_seen(self, count: int) -> None:
        if count <= self._seen_most:
            return
        self._seen_most = count
        if self.settings.state_file is not None:
            try:
                write_json_atomic(self.settings.state_file, {"gpus_seen_most": count})
            except OSError:
                log.warning("could not keep the GPU count in %s", self.settings.state_file, exc_info=True)
