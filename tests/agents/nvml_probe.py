"""Run the NVML sensor alone, built from its spec and a context lending what it declares, and print every
record it publishes, and each GPU report and evidence trigger it makes, as a JSON line.

Started by the tests in a subprocess with LD_LIBRARY_PATH pointing at the fake libnvidia-ml.so.1,
so nvidia-ml-py loads it through its ordinary `CDLL("libnvidia-ml.so.1")`. Stops when stdin closes.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from agents.evidence import FaultContext
from agents.metrics import Metrics
from agents.nvml_calls import NvmlCaller
from agents.signals import SYSTEM_CLOCK, SensorContext, nvml
from agents.signals.nvml.watcher import NvmlSettings
from models.node_records import GpuInfo, NodeRecord


def main() -> None:
    proc_root = Path(sys.argv[1])
    lock = threading.Lock()
    metrics = Metrics()

    def publish(record: NodeRecord) -> None:
        with lock:
            print(record.model_dump_json(), flush=True)

    def report_gpus(gpus: Sequence[GpuInfo], addresses: Sequence[str]) -> None:
        with lock:
            print(json.dumps({"kind": "gpus", "uuids": [g.uuid for g in gpus], "addresses": list(addresses)}),
                  flush=True)

    def trigger_evidence(fault: FaultContext) -> None:
        with lock:
            print(json.dumps({"kind": "evidence_trigger", **dataclasses.asdict(fault)}), flush=True)

    settings = NvmlSettings(event_wait_ms=100, inventory_interval_s=60, inventory_check_s=0.2,
                            processes_interval_s=0.2, proc_root=proc_root, sysfs_root=proc_root / "sys")
    ctx = SensorContext(sensor="nvml", node="gpu-node-1", settings=settings, publish=publish, clock=SYSTEM_CLOCK,
                        metrics=metrics, uses=nvml.SENSOR.uses, nvml_caller=NvmlCaller(0.5, metrics),
                        evidence_trigger=trigger_evidence, gpu_report=report_gpus)
    sensor = nvml.SENSOR.build(ctx)
    stop = threading.Event()
    sensor.start(stop)
    sys.stdin.read()
    stop.set()
    sensor.close()
    print(json.dumps({"kind": "metrics", **metrics.snapshot()}), flush=True)


if __name__ == "__main__":
    main()
