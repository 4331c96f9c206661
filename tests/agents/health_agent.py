"""The whole node agent on a simulated clock, for the GPU health scenarios: `build_agent` with the
fake libnvidia-ml.so.1 (LD_LIBRARY_PATH), a kernel log file and a real broker; the health poller is
stepped by the commands read from stdin, one per line:

  advance SECONDS   poll every health_interval_s of simulated time, up to SECONDS later (the fake
                    NVML's clock file follows, so its `at` steps happen on the same clock)
  line TEXT         append a kernel line stamped with the simulated time
  flush             wait until every spooled record is published, then print {"kind": "flushed"}
  quit              stop the agent

Arguments: the agent's settings as JSON, the fake NVML's clock file, the simulated start (ISO).
Prints one JSON line per command done.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

from agents.main import build_agent
from agents.settings import AgentSettings
from agents.signals.health.poller import HealthPoller


class SimClock:
    def __init__(self, start: datetime) -> None:
        self.at = start
        self._began = time.monotonic()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self.at

    def time_ns(self) -> int:
        return int(self.now().timestamp() * 1e9)

    def monotonic(self) -> float:
        return self.now().timestamp()

    def step(self, seconds: float) -> None:
        with self._lock:
            self.at += timedelta(seconds=seconds)


def main() -> None:
    settings = AgentSettings.model_validate(json.loads(sys.argv[1]))
    clock_file = Path(sys.argv[2])
    start = datetime.fromisoformat(sys.argv[3])
    clock = SimClock(start)
    clock_file.write_text("0")
    agent = build_agent(settings, clock=clock)
    [poller] = [s for s in agent._side if isinstance(s, HealthPoller)]
    agent._side.remove(poller)  # stepped here on the simulated clock instead of its own thread
    worker = threading.Thread(target=agent.run, kwargs={"drain_timeout_s": 30}, daemon=True)
    worker.start()
    poller.poll_once(clock.now())
    print(json.dumps({"kind": "ready", "polls": poller.polls}), flush=True)
    interval = settings.health_interval_s
    for line in sys.stdin:
        command, _, rest = line.rstrip("\n").partition(" ")
        if command == "advance":
            for _ in range(int(float(rest) // interval)):
                clock.step(interval)
                clock_file.write_text(f"{(clock.now() - start).total_seconds():.3f}")
                poller.poll_once(clock.now())
            print(json.dumps({"kind": "advanced", "at": clock.now().isoformat()}), flush=True)
        elif command == "line":
            with open(settings.log_file, "a") as fh:
                fh.write(f"{clock.now().isoformat()} {settings.node} kernel: {rest}\n")
            print(json.dumps({"kind": "written"}), flush=True)
        elif command == "flush":
            deadline = time.monotonic() + 60
            while agent.spool.pending_entries() and time.monotonic() < deadline:
                time.sleep(0.1)
            print(json.dumps({"kind": "flushed", "pending": len(agent.spool.pending_entries())}), flush=True)
        elif command == "quit":
            break
    agent.stop()
    worker.join(timeout=40)
    print(json.dumps({"kind": "stopped"}), flush=True)


if __name__ == "__main__":
    main()
