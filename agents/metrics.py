"""Counters and gauges rendered in the Prometheus text exposition format (no client library)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

_HELP: dict[str, tuple[str, str]] = {
    "xidpipe_agent_kernel_lines_read_total": ("counter", "Kernel log records read from the source."),
    "xidpipe_agent_kernel_foreign_dropped_total": (
        "counter", "Records dropped because user space, not the kernel, wrote them (facility not kern)."),
    "xidpipe_agent_prefilter_kept_total": ("counter", "Kernel lines kept by the GPU pre-filter."),
    "xidpipe_agent_prefilter_dropped_total": ("counter", "Kernel lines dropped by the GPU pre-filter."),
    "xidpipe_agent_kernel_gaps_total": ("counter", "Kernel log gaps detected (overrun or sequence jump)."),
    "xidpipe_agent_kernel_lost_records_total": ("counter", "Kernel log records lost in gaps."),
    "xidpipe_agent_records_spooled_total": ("counter", "Records written to the disk spool."),
    "xidpipe_agent_records_acked_total": ("counter", "Records acknowledged by Kafka."),
    "xidpipe_agent_records_failed_total": ("counter", "Records Kafka rejected permanently."),
    "xidpipe_agent_spool_dropped_total": ("counter", "Non-fault records dropped because the spool was full."),
    "xidpipe_agent_spool_corrupt_total": ("counter", "Corrupt spool records moved aside into spool/corrupt/."),
    "xidpipe_agent_spool_bytes": ("gauge", "Bytes held in the disk spool."),
    "xidpipe_agent_spool_pending": ("gauge", "Records in the spool not yet acknowledged by Kafka."),
    "xidpipe_agent_kafka_connected": ("gauge", "1 when the Kafka producer is connected."),
    "xidpipe_agent_nvml_available": ("gauge", "1 when NVML was initialised."),
    "xidpipe_agent_nvml_call_timeouts_total": ("counter", "NVML calls that exceeded their timeout."),
    "xidpipe_agent_nvml_events_total": ("counter", "NVML events received."),
    "xidpipe_agent_evidence_captures_total": ("counter", "Evidence dossiers captured."),
    "xidpipe_agent_evidence_suppressed_total": ("counter", "Evidence captures suppressed by the per-GPU window."),
    "xidpipe_agent_podresources_errors_total": ("counter", "Failed kubelet PodResources calls."),
}


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = {name: 0.0 for name in _HELP}

    def inc(self, name: str, amount: float = 1.0) -> None:
        with self._lock:
            self._values[name] = self._values.get(name, 0.0) + amount

    def set(self, name: str, value: float) -> None:
        with self._lock:
            self._values[name] = value

    def get(self, name: str) -> float:
        with self._lock:
            return self._values.get(name, 0.0)

    def snapshot(self) -> Mapping[str, float]:
        with self._lock:
            return dict(self._values)

    def render(self) -> str:
        lines: list[str] = []
        for name, value in sorted(self.snapshot().items()):
            kind, text = _HELP.get(name, ("gauge", name))
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name} {value:g}")
        return "\n".join(lines) + "\n"
