"""One small endpoint server for a service: `/metrics` (the Prometheus exposition of its registry),
`/healthz` (liveness: the process's loops are alive) and `/readyz` (readiness: its dependencies are
connected), in a daemon thread, so a stuck event loop cannot stop a probe from seeing it.

`/healthz` and `/readyz` answer JSON: `{"ok": bool, "checks": {name: "ok" | reason}, ...}`, 200 when
ok, 503 when not. A check is a function returning None when fine or the reason it is not; one that
raises fails with its exception's text, one that takes longer than `CHECK_TIMEOUT_S` fails as timed
out. GET (and HEAD) only; a client has `REQUEST_TIMEOUT_S` to send its request, so a silent
connection holds no thread for long. The server binds where it is told (services default to
127.0.0.1; the chart binds the pod's IP).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from service.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 5.0  # a client's time to send its request line and headers
CHECK_TIMEOUT_S = 3.0  # a readiness check that takes longer fails (a database that does not answer)

Check = Callable[[], str | None]
Report = Callable[[], Mapping[str, Any]]


def run_checks(checks: Mapping[str, Check], timeout_s: float = CHECK_TIMEOUT_S) -> dict[str, Any]:
    """Run `checks` side by side; `{"ok": all passed, "checks": {name: "ok" | why not}}`."""
    results: dict[str, str] = {}
    if checks:
        pool = ThreadPoolExecutor(len(checks), thread_name_prefix="check")
        try:
            futures = {name: pool.submit(fn) for name, fn in checks.items()}
            for name, future in futures.items():
                try:
                    problem = future.result(timeout=timeout_s)
                except FutureTimeout:
                    problem = f"no answer within {timeout_s:g} s"
                except Exception as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                results[name] = "ok" if problem is None else str(problem)[:300]
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    return {"ok": all(v == "ok" for v in results.values()), "checks": results}


def checks_report(checks: Mapping[str, Check], timeout_s: float = CHECK_TIMEOUT_S) -> Report:
    return lambda: run_checks(checks, timeout_s)


class EndpointServer:
    """`/metrics`, `/healthz` and `/readyz` on (host, port); port 0 takes a free one (see `port`).

    `live` and `ready` return the JSON object to answer, with `ok`; `ready` defaults to `live`.
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry, *, live: Report,
                 ready: Report | None = None, request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/metrics": lambda: (200, CONTENT_TYPE, generate_latest(registry)),
            "/healthz": lambda: _json_reply(live),
            "/readyz": lambda: _json_reply(ready or live),
        }

        class Handler(BaseHTTPRequestHandler):
            timeout = request_timeout_s
            server_version = "xidpipe"  # the `Server` header: no Python version for a scanner to match
            sys_version = ""

            def do_GET(self) -> None:
                self._answer(body=True)

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def _answer(self, body: bool) -> None:
                route = routes.get(self.path.split("?", 1)[0])
                if route is None:
                    code, ctype, data = 404, "application/json", b'{"error": "not found"}\n'
                else:
                    try:
                        code, ctype, data = route()
                    except Exception as exc:  # a bug in a report: say so, keep serving
                        log.exception("%s failed", self.path[:100])
                        code, ctype = 500, "application/json"
                        data = json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def _refuse(self) -> None:
                data = b'{"error": "method not allowed"}\n'
                self.send_response(405)
                self.send_header("Allow", "GET, HEAD")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="endpoint", daemon=True)

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> EndpointServer:
        self._thread.start()
        log.info("metrics and health listening on %s:%d", self.host, self.port,
                 extra={"host": self.host, "port": self.port})
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _json_reply(report: Report) -> tuple[int, str, bytes]:
    state = dict(report())
    return (200 if state.get("ok") else 503), "application/json", (json.dumps(state, default=str) + "\n").encode()
