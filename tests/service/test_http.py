import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from service.http import EndpointServer, checks_report, run_checks
from service.metrics import WorkerMetrics, exposed_names


def _call(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.fixture
def database_up() -> threading.Event:
    up = threading.Event()
    up.set()
    return up


@pytest.fixture
def server(database_up: threading.Event) -> Iterator[tuple[str, WorkerMetrics]]:
    metrics = WorkerMetrics()
    ready = checks_report({"database": lambda: None if database_up.is_set() else "connection refused",
                           "kafka": lambda: None})
    srv = EndpointServer("127.0.0.1", 0, metrics.registry, live=lambda: {"ok": True, "loops": 2}, ready=ready)
    srv.start()
    try:
        yield f"http://127.0.0.1:{srv.port}", metrics
    finally:
        srv.stop()


def test_metrics_are_the_registry_exposition(server: tuple[str, WorkerMetrics]) -> None:
    base, metrics = server
    metrics.fault_events.labels("hardware").inc(3)
    metrics.xid_to_incident.observe(0.3)
    metrics.consumer_lag.labels("xidpipe.node.kernel", "4").set(17)
    code, headers, body = _call(f"{base}/metrics")
    text = body.decode()
    assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert 'xidpipe_worker_fault_events_total{class="hardware"} 3.0' in text
    assert 'xidpipe_worker_consumer_lag{partition="4",topic="xidpipe.node.kernel"} 17.0' in text
    assert 'xidpipe_worker_xid_to_incident_seconds_bucket{le="0.5"} 1.0' in text
    assert 'xidpipe_worker_xid_to_incident_seconds_bucket{le="0.25"} 0.0' in text
    assert "# TYPE xidpipe_worker_xid_to_incident_seconds histogram" in text


def test_readyz_is_503_with_the_reason_while_a_dependency_is_down(server: tuple[str, WorkerMetrics],
                                                                  database_up: threading.Event) -> None:
    base, _ = server
    code, headers, body = _call(f"{base}/readyz")
    assert code == 200 and json.loads(body) == {"ok": True, "checks": {"database": "ok", "kafka": "ok"}}
    assert headers["Content-Type"] == "application/json"
    database_up.clear()
    code, _, body = _call(f"{base}/readyz")
    assert code == 503 and json.loads(body) == {"ok": False, "checks": {"database": "connection refused",
                                                                          "kafka": "ok"}}
    code, _, body = _call(f"{base}/healthz")  # liveness does not follow a dependency
    assert code == 200 and json.loads(body) == {"ok": True, "loops": 2}


def test_get_and_head_only_and_unknown_paths_are_404(server: tuple[str, WorkerMetrics]) -> None:
    base, _ = server
    for method in ("POST", "PUT", "DELETE"):
        code, headers, _ = _call(f"{base}/metrics", method)
        assert code == 405 and headers["Allow"] == "GET, HEAD"
    code, headers, body = _call(f"{base}/healthz", "HEAD")
    assert code == 200 and body == b"" and int(headers["Content-Length"]) > 0
    assert _call(f"{base}/nope")[0] == 404
    assert _call(f"{base}/healthz?verbose=1")[0] == 200


def test_a_report_that_raises_is_a_500_and_the_server_goes_on() -> None:
    def broken() -> dict[str, object]:
        raise RuntimeError("report bug")

    srv = EndpointServer("127.0.0.1", 0, WorkerMetrics().registry, live=broken).start()
    try:
        code, _, body = _call(f"http://127.0.0.1:{srv.port}/healthz")
        assert code == 500 and "report bug" in json.loads(body)["error"]
        assert _call(f"http://127.0.0.1:{srv.port}/metrics")[0] == 200
    finally:
        srv.stop()


def test_checks_fail_on_an_exception_or_a_timeout_and_name_why() -> None:
    release = threading.Event()

    def hangs() -> str | None:
        release.wait(10)
        return None

    def raises() -> str | None:
        raise ConnectionError("no route to host")

    started = time.monotonic()
    out = run_checks({"slow": hangs, "bad": raises, "fine": lambda: None}, timeout_s=0.3)
    release.set()
    assert time.monotonic() - started < 3
    assert out == {"ok": False, "checks": {"slow": "no answer within 0.3 s",
                                           "bad": "ConnectionError: no route to host", "fine": "ok"}}
    assert run_checks({}) == {"ok": True, "checks": {}}


def test_a_silent_client_is_dropped_after_the_request_timeout() -> None:
    srv = EndpointServer("127.0.0.1", 0, WorkerMetrics().registry, live=lambda: {"ok": True},
                         request_timeout_s=0.5).start()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as idle:
            started = time.monotonic()
            assert idle.recv(1) == b""
            assert time.monotonic() - started < 4
        assert _call(f"http://127.0.0.1:{srv.port}/healthz")[0] == 200  # and the server still answers
    finally:
        srv.stop()


def test_exposed_names_include_labelled_series_before_their_first_value() -> None:
    names = exposed_names(WorkerMetrics().registry)
    assert {"xidpipe_worker_dead_letters_total", "xidpipe_worker_consumer_lag",
            "xidpipe_worker_xid_to_incident_seconds_bucket", "xidpipe_worker_xid_to_incident_seconds_count",
            "xidpipe_worker_incidents_opened_total"} <= names
    assert "xidpipe_worker_dead_letters" not in names
