import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agents import health
from agents.metrics import Metrics
from agents.runtime import Agent
from agents.settings import AgentSettings
from service.logs import JsonFormatter
from tests.polling import poll


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_healthz_and_metrics(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
                   "kernel: eth0: up\n")
    settings = AgentSettings(node="n1", bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "s", source="file",
                             log_file=log, nvml_enabled=False, podresources_enabled=False,
                             evidence_enabled=False, metrics_port=0)
    agent = Agent(settings)
    agent.start()
    try:
        assert agent.health_server is not None
        base = f"http://127.0.0.1:{agent.health_server.port}"
        code, body = _get(f"{base}/healthz")
        assert code == 200
        state = json.loads(body)
        assert state["ok"] and state["kernel_path_alive"] and state["node"] == "n1"
        _, text = _get(f"{base}/metrics")
        assert "# TYPE xidpipe_agent_prefilter_kept_total counter" in text
        lines = dict(ln.rsplit(" ", 1) for ln in text.splitlines() if not ln.startswith("#"))
        assert float(lines["xidpipe_agent_kafka_connected"]) == 0  # nothing listens on port 1
        poll("the Xid line to wait in the spool", lambda: agent.metrics.get("xidpipe_agent_spool_pending") >= 1, 10,
             interval=0.02)
        code, body = _get(f"{base}/readyz")  # live, but not ready
        assert code == 503 and "kafka not connected" in json.loads(body)["reason"]
        assert _get(f"{base}/nope")[0] == 404
    finally:
        agent.stop()


def test_settings_from_environment_keep_secrets_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    monkeypatch.setenv("XIDPIPE_AGENT_SOURCE", "journald")
    monkeypatch.setenv("XIDPIPE_AGENT_SASL_PASSWORD", "s3cr3t-value")
    monkeypatch.setenv("XIDPIPE_AGENT_SPOOL_MAX_BYTES", str(64 * 1024 * 1024))
    s = AgentSettings()
    assert (s.node, s.source, s.spool_max_bytes) == ("gpu-node-7", "journald", 64 * 1024 * 1024)
    assert s.sasl_password is not None and s.sasl_password.get_secret_value() == "s3cr3t-value"
    assert "s3cr3t-value" not in repr(s) and "s3cr3t-value" not in s.model_dump_json()


def test_json_log_lines_carry_context() -> None:
    record = logging.LogRecord("agents.x", logging.WARNING, __file__, 1, "GPU missing", None, None)
    record.gpu_uuid = "GPU-1"
    out = json.loads(JsonFormatter().format(record))
    assert out["message"] == "GPU missing" and out["gpu_uuid"] == "GPU-1" and out["level"] == "warning"


def _agent(tmp_path: Path, **kw: object) -> Agent:
    log = tmp_path / "kern.log"
    log.write_text("kernel: eth0: up\n")
    settings = AgentSettings(node="n1", bootstrap_servers="127.0.0.1:1", state_dir=tmp_path / "s", source="file",
                             log_file=log, nvml_enabled=False, podresources_enabled=False,
                             evidence_enabled=False, metrics_port=0, **kw)  # type: ignore[arg-type]
    return Agent(settings)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_is_503_when_the_publisher_thread_dies(tmp_path: Path) -> None:
    agent = _agent(tmp_path)

    def broken_run(stop: threading.Event) -> None:
        raise RuntimeError("publisher bug")

    agent.publisher.run = broken_run  # type: ignore[method-assign]
    agent.start()
    try:
        assert agent.health_server is not None
        url = f"http://127.0.0.1:{agent.health_server.port}/healthz"
        poll("/healthz to answer 503", lambda: _get(url)[0] == 503, 10, interval=0.02)
        state = json.loads(_get(url)[1])
        assert not state["ok"] and "publisher bug" in state["dead_threads"]["publisher"]
        assert state["kernel_path_alive"]  # the kernel path alone no longer makes the agent healthy
    finally:
        agent.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_healthz_is_503_when_a_sensor_thread_dies(tmp_path: Path) -> None:
    agent = _agent(tmp_path)

    class CrashingSensor:
        def start(self, stop: threading.Event) -> None:
            threading.Thread(target=self._run, name="crashing-sensor", daemon=True).start()

        def _run(self) -> None:
            raise OSError("socket gone")

        def close(self) -> None:
            return

    agent.add_side_path(CrashingSensor())
    agent.start()
    try:
        assert agent.health_server is not None
        url = f"http://127.0.0.1:{agent.health_server.port}/healthz"
        poll("/healthz to answer 503", lambda: _get(url)[0] == 503, 10, interval=0.02)
        assert "socket gone" in json.loads(_get(url)[1])["dead_threads"]["crashing-sensor"]
    finally:
        agent.stop()


def test_the_agent_starts_and_publishes_on_over_a_corrupt_spool(tmp_path: Path) -> None:
    first = _agent(tmp_path)
    for i in range(3):
        first.spool.append("xidpipe.node.kernel", "n1", f'{{"i":{i}}}', fault=True, record_id=f"r{i}")
    first.spool.close()
    seg = next((tmp_path / "s" / "spool").glob("*.seg"))
    lines = seg.read_bytes().splitlines(keepends=True)
    seg.write_bytes(lines[0] + b"\x00garbage\n" + lines[1] + lines[2][:-5] + b"}}}\n")
    again = _agent(tmp_path)
    try:
        assert [e.record_id for e in again.spool.pending_entries()] == ["r0", "r1"]
        assert again.metrics.get("xidpipe_agent_spool_corrupt_total") == 2
    finally:
        again.spool.close()


def test_metrics_listen_on_the_configured_address_and_drop_silent_clients(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert AgentSettings(node="n1").metrics_host == "127.0.0.1"
    monkeypatch.setattr(health, "REQUEST_TIMEOUT_S", 0.5)
    server = health.HealthServer("127.0.0.2", 0, Metrics(), lambda: {"ok": True})
    server.start()
    try:
        assert server._server.server_address[0] == "127.0.0.2"
        with socket.create_connection(("127.0.0.2", server.port), timeout=5) as idle:
            started = time.monotonic()
            assert idle.recv(1) == b""  # the server hung up on a client that sent nothing
            assert time.monotonic() - started < 4
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
    finally:
        server.stop()
