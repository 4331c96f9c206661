"""`/metrics`, `/healthz` and `/readyz` on a configurable address (`service.http.EndpointServer`, a
daemon thread), and the watch on the agent's threads that `/healthz` reports.

The server binds to `metrics_host` (127.0.0.1 unless the settings say otherwise: the DaemonSet sets
the pod's own IP so the kubelet's probes and Prometheus reach it, and nothing else on the node's
other interfaces), answers GET only, and gives each connection `REQUEST_TIMEOUT_S` to send its
request: a client that connects and sends nothing holds no thread for long.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from agents.metrics import Metrics
from service.http import EndpointServer

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 5.0


class ThreadWatch:
    """The agent's threads that died: of an uncaught exception (seen through `threading.excepthook`,
    so the sensors' own threads count too), or by ending while they should run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: dict[str, str] = {}
        self._previous: Any = None

    def install(self) -> None:
        previous = self._previous = threading.excepthook

        def hook(args: Any) -> None:
            name = args.thread.name if args.thread is not None else "?"
            with self._lock:
                self._failed[name] = f"{args.exc_type.__name__}: {args.exc_value}"[:300]
            previous(args)

        threading.excepthook = hook

    def uninstall(self) -> None:
        if self._previous is not None:
            threading.excepthook = self._previous
            self._previous = None

    def failed(self, name: str, reason: str) -> None:
        with self._lock:
            self._failed[name] = reason[:300]

    def dead(self, expected_alive: dict[str, threading.Thread | None]) -> dict[str, str]:
        """Thread name → why it is dead: those that failed, and those of `expected_alive` that ended."""
        with self._lock:
            out = dict(self._failed)
        for name, thread in expected_alive.items():
            if thread is not None and not thread.is_alive():
                out.setdefault(name, "ended")
        return out


class HealthServer(EndpointServer):
    """The agent's endpoint: `/metrics`, `/healthz` (its threads alive) and `/readyz` (alive, and Kafka
    connected: while it is not, records are spooled on the node and the agent is live but not ready)."""

    def __init__(self, host: str, port: int, metrics: Metrics, health: Callable[[], dict[str, Any]]) -> None:
        def ready() -> dict[str, Any]:
            state = dict(health())
            if state.get("ok") and not state.get("kafka_connected", True):
                state["ok"] = False
                state["reason"] = f"kafka not connected: {state.get('spool_pending', 0)} records spooled"
            return state

        super().__init__(host, port, metrics.registry, live=health, ready=ready, request_timeout_s=REQUEST_TIMEOUT_S)
