"""`/healthz` and `/metrics` on a configurable address (stdlib http.server in a daemon thread), and
the watch on the agent's threads that `/healthz` reports.

The server binds to `metrics_host` (127.0.0.1 unless the settings say otherwise: the DaemonSet sets
the pod's own IP so the kubelet's probes and Prometheus reach it, and nothing else on the node's
other interfaces), answers GET only, and gives each connection `REQUEST_TIMEOUT_S` to send its
request: a client that connects and sends nothing holds no thread for long.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.metrics import Metrics

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


class HealthServer:
    def __init__(self, host: str, port: int, metrics: Metrics, health: Callable[[], dict[str, Any]]) -> None:
        metrics_ref, health_ref = metrics, health

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    body = metrics_ref.render().encode()
                    self._reply(200, "text/plain; version=0.0.4; charset=utf-8", body)
                elif self.path == "/healthz":
                    state = health_ref()
                    code = 200 if state.get("ok") else 503
                    self._reply(code, "application/json", json.dumps(state).encode())
                else:
                    self._reply(404, "text/plain", b"not found\n")

            def _reply(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="health", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("health and metrics listening", extra={"host": self._server.server_address[0], "port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
