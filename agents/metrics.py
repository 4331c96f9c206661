"""The agent's metrics on `prometheus_client`, in a registry of its own, addressed by their full
names: `inc("xidpipe_agent_records_acked_total")`, `set("xidpipe_agent_spool_bytes", n)`.

Counters keep the `_total` name they are exposed under; gauges are plain values. The spool depth is
`xidpipe_agent_spool_pending` (records) and `xidpipe_agent_spool_bytes` (bytes).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

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
    "xidpipe_agent_health_polls_total": ("counter", "GPU health polls (every GPU and the node's view, once)."),
    "xidpipe_agent_health_records_total": ("counter", "GPU and node health records published (never one per poll)."),
    "xidpipe_agent_evidence_captures_total": ("counter", "Evidence dossiers captured."),
    "xidpipe_agent_evidence_suppressed_total": ("counter", "Evidence captures suppressed by the per-GPU window."),
    "xidpipe_agent_podresources_errors_total": ("counter", "Failed kubelet PodResources calls."),
    "xidpipe_agent_workloads_errors_total": ("counter", "Failed pod lists and watches of the workloads sensor."),
    "xidpipe_agent_workloads_lists_total": (
        "counter", "Lists of the node's pods (the first, then one per expired watch)."),
    "xidpipe_agent_workloads_watches_total": ("counter", "Pod watch requests (each resumed from a resourceVersion)."),
    "xidpipe_agent_workloads_owner_reads_total": ("counter", "Owners read from the API server (once per owner)."),
    "xidpipe_agent_workloads_pods": ("gauge", "GPU pods whose workload the last snapshot holds."),
}


class Metrics:
    """The agent's registry; every metric exists (at 0) from the start."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._counters: dict[str, Counter] = {}
        self._gauges: dict[str, Gauge] = {}
        for name, (kind, text) in _HELP.items():
            if kind == "counter":
                self._counters[name] = Counter(name, text, registry=self.registry)
            else:
                self._gauges[name] = Gauge(name, text, registry=self.registry)

    def inc(self, name: str, amount: float = 1.0) -> None:
        if amount:
            self._counters[name].inc(amount)

    def set(self, name: str, value: float) -> None:
        self._gauges[name].set(value)

    def get(self, name: str) -> float:
        metric = self._counters.get(name) or self._gauges.get(name)
        if metric is None:
            raise KeyError(name)
        return float(metric._value.get())

    def snapshot(self) -> Mapping[str, float]:
        return {name: self.get(name) for name in _HELP}

    def render(self) -> str:
        return generate_latest(self.registry).decode()
