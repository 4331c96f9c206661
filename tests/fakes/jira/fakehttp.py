"""A small threaded HTTP server for stand-ins that speak a real service's protocol, with recorded
requests and scripted faults (429 with Retry-After, 5xx, slow responses, timeouts, answers held until
the test releases them).

Used by the Jira and the Slack stand-ins. Binds to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float  # time.monotonic()

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, data: Any, **headers: str) -> Response:
        return cls(status, json.dumps(data).encode(), {"Content-Type": "application/json;charset=UTF-8", **headers})

    @classmethod
    def text(cls, status: int, text: str, **headers: str) -> Response:
        return cls(status, text.encode(), {"Content-Type": "text/plain; charset=utf-8", **headers})


@dataclass
class Fault:
    """What to do to the next `times` requests matching `method` and the `path` regex.

    kind: "status" answers `status` (with `retry_after` and `body`) without handling the request;
    "slow" handles it and answers after `delay` seconds; "timeout" handles it, then answers after
    `delay` seconds (longer than the client waits: the client sees a timeout although the server
    did the work, the ambiguous case); "drop" closes the connection without an answer, unhandled;
    "hold" handles it and answers once the test calls `release()` (or the server stops): a call
    known to be in flight for as long as the test needs.
    """

    method: str
    path: str
    kind: str = "status"
    status: int = 500
    retry_after: int | None = None
    body: Any = None
    delay: float = 0.0
    times: int = 1
    used: int = 0
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        """Answer the held requests, and every later one at once."""
        self.released.set()


Handler = Callable[[Request], Response]


class FakeHTTPServer:
    """Routes `(method, path regex)` to handlers; records every request; applies faults first."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self._routes: list[tuple[str, re.Pattern[str], Callable[..., Response]]] = []
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None
        self.error_body: Callable[[int], Any] = lambda status: {"error": f"HTTP {status}"}

    # --- setup --------------------------------------------------------------------------------
    def route(self, method: str, pattern: str, handler: Callable[..., Response]) -> None:
        self._routes.append((method, re.compile(pattern + r"$"), handler))

    def inject(self, method: str, path: str, kind: str = "status", status: int = 500, *, retry_after: int | None = None,
               body: Any = None, delay: float = 0.0, times: int = 1) -> Fault:
        fault = Fault(method, path, kind, status, retry_after, body, delay, times)
        with self._lock:
            self.faults.append(fault)
        return fault

    def start(self) -> FakeHTTPServer:
        fake = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake._connections.add(self.connection)

            def finish(self) -> None:
                with fake._lock:
                    fake._connections.discard(self.connection)
                super().finish()

            def _any(self) -> None:
                fake._dispatch(self)

            do_GET = do_POST = do_PUT = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and end every connection (keep-alive handlers would otherwise wait on them)."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 5
        while self._connections and time.monotonic() < deadline:
            time.sleep(0.01)

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # --- queries for tests ----------------------------------------------------------------------
    def calls(self, method: str | None = None, path: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if (method is None or r.method == method)
                    and (path is None or re.fullmatch(path, r.path))]

    # --- serving --------------------------------------------------------------------------------
    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.used < f.times and f.method in (method, "*") and re.fullmatch(f.path, path):
                    f.used += 1
                    return f
        return None

    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        req = Request(h.command, parts.path, parse_qs(parts.query, keep_blank_values=True),
                      {k.lower(): v for k, v in h.headers.items()}, body, time.monotonic())
        with self._lock:
            self.requests.append(req)
        fault = self._take_fault(req.method, req.path)
        if fault is not None and fault.kind == "drop":
            h.close_connection = True
            return
        if fault is not None and fault.kind == "status":
            headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            body_obj = fault.body if fault.body is not None else self.error_body(fault.status)
            resp = (Response.text(fault.status, body_obj, **headers) if isinstance(body_obj, str)
                    else Response.json(fault.status, body_obj, **headers))
            self._write(h, resp)
            return
        resp = self._handle(req)
        if fault is not None and fault.kind == "hold":
            while not fault.released.wait(0.05) and not self._stopping.is_set():
                pass
        if fault is not None and fault.kind in ("slow", "timeout"):
            self._stopping.wait(fault.delay)
            if fault.kind == "timeout":
                h.close_connection = True
        self._write(h, resp)

    def _handle(self, req: Request) -> Response:
        for method, pattern, handler in self._routes:
            m = pattern.match(req.path)
            if m and method == req.method:
                with self._lock:
                    return handler(req, *m.groups())
        return Response.json(404, self.error_body(404))

    def _write(self, h: BaseHTTPRequestHandler, resp: Response) -> None:
        try:
            h.send_response(resp.status)
            for k, v in resp.headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(resp.body)))
            h.end_headers()
            h.wfile.write(resp.body)
        except (BrokenPipeError, ConnectionResetError):
            pass
