"""`/healthz` and `/metrics` on a local port (stdlib http.server in a daemon thread)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents.metrics import Metrics

log = logging.getLogger(__name__)


class HealthServer:
    def __init__(self, host: str, port: int, metrics: Metrics, health: Callable[[], dict[str, Any]]) -> None:
        metrics_ref, health_ref = metrics, health

        class Handler(BaseHTTPRequestHandler):
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
        log.info("health and metrics listening", extra={"port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
