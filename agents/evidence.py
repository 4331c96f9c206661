"""Evidence captured at fault time, before anyone resets anything.

On a fault line or a fault a sensor saw (`trigger`), at most once per GPU per window, a worker thread
captures: `nvidia-smi -q -i <bus id>`, `lspci -vvv -s <bdf>`, `nvidia-smi topo -m`, the faulting
pid's cgroup and command line, and the kernel-log lines around the fault: the lines before it and
those the driver writes in the `follow_s` seconds after it (the Xid 63 after a 48, the Xid 154 and
the crash dump after a 119, an SXid's severity lines, the bus-loss follow-ups), each after its time
in UTC where the source gave one (`models.evidence_lines.capture_line`; the dossier selects the
fault's own lines from it and attaches the whole capture). Each capture has a
timeout and a size cap and is gzip-compressed; commands run with a minimal environment, no
environment variables are ever read from /proc, and token/password/key-looking values in command
lines are redacted. The dossier goes to the evidence topic keyed by node.
"""

from __future__ import annotations

import base64
import gzip
import logging
import os
import queue
import re
import shutil
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from agents.metrics import Metrics
from agents.procfs import PROC_READ_MAX, read_bounded
from models.evidence_lines import capture_line
from models.kernlog.messages import XID
from models.node_records import Evidence, EvidenceItem, GpuInfo, NodeRecord
from models.pci import normalize_pci
from models.redact import redact as redact_text
from models.redact import redact_argv

log = logging.getLogger(__name__)

# "GPU at PCI:0000:5e:00", "GPU 0000:3b:00.0": a driver line about one GPU, not an Xid.
# How long the kernel-log window waits after the fault for the lines the driver writes about it: its
# follow-up lines come within a few seconds (Xid 63 a second after Xid 48, Xid 154 two after Xid 119).
FOLLOW_S = 5.0
_GPU_AT = re.compile(r"GPU (?:at PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)")


@dataclass(frozen=True)
class FaultContext:
    """The fault evidence is captured for: the record that reported it, the GPU's PCI address (normalised,
    `0000:3b:00.0`) and UUID where known, the Xid and the faulting pid."""

    trigger_record_id: str
    bus: str | None
    gpu_uuid: str | None
    xid: int | None
    pid: int | None


def parse_fault_line(message: str) -> tuple[str | None, int | None, int | None]:
    """(PCI address, Xid, pid) from an NVRM fault line, where present."""
    m = XID.search(message)
    if m:
        pid = (m["pid"] or "").strip()
        return normalize_pci(m["pci"]), int(m["xid"]), int(pid) if pid.isdigit() else None
    g = _GPU_AT.search(message)
    if g:
        return normalize_pci(g["bus"]), None, None
    return None, None, None


class EvidenceCollector:
    def __init__(
        self,
        *,
        node: str,
        publish: Callable[[NodeRecord], Any],
        metrics: Metrics,
        window_s: float = 600.0,
        timeout_s: float = 10.0,
        max_bytes: int = 256 * 1024,
        kernel_lines: int = 200,
        nvidia_smi: str = "nvidia-smi",
        lspci: str = "lspci",
        proc_root: Path = Path("/proc"),
        gpu_lookup: Callable[[str], GpuInfo | None] = lambda _bus: None,
        follow_s: float = FOLLOW_S,
    ) -> None:
        self.node = node
        self._publish = publish
        self._metrics = metrics
        self._window = window_s
        self._timeout = timeout_s
        self._max_bytes = max_bytes
        self._lines: deque[tuple[datetime | None, str]] = deque(maxlen=max(kernel_lines, 1))
        self._follow_s = follow_s
        self._lines_lock = threading.Lock()
        self._nvidia_smi = nvidia_smi
        self._lspci = lspci
        self._proc_root = proc_root
        self._last: dict[str, float] = {}
        self._last_lock = threading.Lock()
        self._queue: queue.Queue[FaultContext] = queue.Queue(maxsize=64)
        self._gpu_lookup = gpu_lookup  # the GPU at a PCI address (`agents.gpus.NodeGpus.gpu_for_bus`)
        self._worker = threading.Thread(target=self._work, name="evidence", daemon=True)
        self._worker.start()

    @classmethod
    def from_settings(cls, settings: Any, *, publish: Callable[[NodeRecord], Any], metrics: Metrics,
                      gpu_lookup: Callable[[str], GpuInfo | None]) -> EvidenceCollector:
        return cls(node=settings.node, publish=publish, metrics=metrics, window_s=settings.evidence_window_s,
                   timeout_s=settings.evidence_timeout_s, max_bytes=settings.evidence_max_bytes,
                   kernel_lines=settings.evidence_kernel_lines, nvidia_smi=settings.nvidia_smi,
                   lspci=settings.lspci, proc_root=settings.proc_root, gpu_lookup=gpu_lookup)

    # --- triggers (called from the kernel path and the sensors: never block) ----------------
    def observe_line(self, message: str, at: datetime | None = None) -> None:
        """A kernel-log line as read, with its event time when the source knows it."""
        with self._lines_lock:
            self._lines.append((at, message))

    def observe_lines(self, messages: list[str]) -> None:
        with self._lines_lock:
            self._lines.extend((None, m) for m in messages)

    def on_kernel_fault(self, record_id: str, message: str) -> None:
        bus, xid, pid = parse_fault_line(message)
        gpu = self._gpu_lookup(bus) if bus else None
        self.trigger(FaultContext(record_id, bus, gpu.uuid if gpu else None, xid, pid))

    def trigger(self, ctx: FaultContext) -> None:
        """Capture evidence for a fault, unless this GPU's was captured within the window."""
        key = ctx.bus or ctx.gpu_uuid or "unknown-gpu"
        now = time.monotonic()
        with self._last_lock:
            last = self._last.get(key)
            if last is not None and now - last < self._window:
                self._metrics.inc("xidpipe_agent_evidence_suppressed_total")
                return
            self._last[key] = now
        try:
            self._queue.put_nowait(ctx)
        except queue.Full:
            log.error("evidence queue full; capture skipped", extra={"pci_bus_id": ctx.bus})

    # --- capture --------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            ctx = self._queue.get()
            try:
                self._publish(self.capture(ctx, follow_until=time.monotonic() + self._follow_s))
                self._metrics.inc("xidpipe_agent_evidence_captures_total")
            except Exception:
                log.exception("evidence capture failed", extra={"pci_bus_id": ctx.bus})

    def capture(self, ctx: FaultContext, follow_until: float | None = None) -> Evidence:
        """The evidence of one fault: the tools' outputs first (the GPU's state before anyone acts), then
        the kernel-log window once `follow_until` (a `time.monotonic()`) has passed, so that it holds the
        lines the driver wrote after the fault too."""
        items: list[EvidenceItem] = []
        smi = shutil.which(self._nvidia_smi)
        if ctx.bus:
            items.append(self._run("nvidia-smi-q", smi, ["-q", "-i", ctx.bus]))
        else:
            items.append(self._run("nvidia-smi-q", smi, ["-q"]))
        if ctx.bus:
            items.append(self._run("lspci", shutil.which(self._lspci), ["-vvv", "-s", ctx.bus]))
        items.append(self._run("nvidia-smi-topo", smi, ["topo", "-m"]))
        if ctx.pid is not None:
            items.extend(self._process(ctx.pid))
        if follow_until is not None:
            time.sleep(max(0.0, follow_until - time.monotonic()))
        with self._lines_lock:
            window = "".join(capture_line(at, message) + "\n" for at, message in self._lines)
        items.append(self._item("kernel-log", (), "ok", window.encode()))
        log.info("evidence captured", extra={"pci_bus_id": ctx.bus, "gpu_uuid": ctx.gpu_uuid, "xid": ctx.xid,
                                             "items": len(items)})
        return Evidence(
            node=self.node,
            record_id=f"evidence:{ctx.trigger_record_id}",
            trigger_record_id=ctx.trigger_record_id,
            gpu_uuid=ctx.gpu_uuid,
            pci_bus_id=ctx.bus,
            xid=ctx.xid,
            pid=ctx.pid,
            items=tuple(items),
        )

    def _item(self, name: str, command: tuple[str, ...], status: str, data: bytes, detail: str | None = None,
              cut: bool = False) -> EvidenceItem:
        truncated = cut or len(data) > self._max_bytes
        data = data[: self._max_bytes]
        return EvidenceItem(
            name=name, command=command, status=status,  # type: ignore[arg-type]
            truncated=truncated, size_bytes=len(data),
            data=base64.b64encode(gzip.compress(data, 6)).decode(), detail=detail,
        )

    def _run(self, name: str, binary: str | None, args: list[str]) -> EvidenceItem:
        if binary is None:
            return self._item(name, (), "absent", b"", detail="command not found")
        cmd = (binary, *args)
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C"}
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL)
        except OSError as exc:
            return self._item(name, cmd, "failed", b"", detail=str(exc))
        try:
            out, _ = proc.communicate(timeout=self._timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            return self._item(name, cmd, "timeout", redact_text(out.decode("utf-8", "replace")).encode(),
                              detail=f"killed after {self._timeout} s")
        status = "ok" if proc.returncode == 0 else "failed"
        return self._item(name, cmd, status, redact_text(out.decode("utf-8", "replace")).encode(),
                          detail=None if status == "ok" else f"exit {proc.returncode}")

    def _process(self, pid: int) -> list[EvidenceItem]:
        """The faulting process's cgroup and command line, each read up to PROC_READ_MAX bytes (the
        process chose its argv) and marked truncated past it; the argv is redacted at once."""
        base = self._proc_root / str(pid)
        items = []
        try:
            data, cut = read_bounded(base / "cgroup", PROC_READ_MAX)
            items.append(self._item("process-cgroup", (), "ok", data, cut=cut))
        except OSError as exc:
            items.append(self._item("process-cgroup", (), "failed", b"", detail=str(exc)))
        try:
            data, cut = read_bounded(base / "cmdline", PROC_READ_MAX)
            argv = [a.decode("utf-8", "replace") for a in data.split(b"\0") if a]
            items.append(self._item("process-cmdline", (), "ok", "\n".join(redact_argv(argv)).encode(), cut=cut,
                                    detail=f"cut at {PROC_READ_MAX} bytes" if cut else None))
        except OSError as exc:
            items.append(self._item("process-cmdline", (), "failed", b"", detail=str(exc)))
        return items
