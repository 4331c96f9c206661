"""Run the NVML side path alone and print every record it publishes as a JSON line.

Started by the tests in a subprocess with LD_LIBRARY_PATH pointing at the fake libnvidia-ml.so.1,
so nvidia-ml-py loads it through its ordinary `CDLL("libnvidia-ml.so.1")`. Stops when stdin closes.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from agents.metrics import Metrics
from agents.signals.nvml.watcher import NvmlWatcher
from models.node_records import NodeRecord


def main() -> None:
    proc_root = Path(sys.argv[1])
    lock = threading.Lock()
    metrics = Metrics()

    def publish(record: NodeRecord) -> None:
        with lock:
            print(record.model_dump_json(), flush=True)

    watcher = NvmlWatcher(
        node="gpu-node-1", publish=publish, metrics=metrics, call_timeout_s=0.5, event_wait_ms=100,
        inventory_interval_s=60, inventory_check_s=0.2, processes_interval_s=0.2, proc_root=proc_root,
        sysfs_root=proc_root / "sys",
    )
    stop = threading.Event()
    watcher.start(stop)
    sys.stdin.read()
    stop.set()
    watcher.close()
    print(json.dumps({"kind": "metrics", **metrics.snapshot()}), flush=True)


if __name__ == "__main__":
    main()
