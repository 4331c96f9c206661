import json
import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agents.jsonlog import JsonFormatter
from agents.runtime import Agent
from agents.settings import AgentSettings


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
    assert out["msg"] == "GPU missing" and out["gpu_uuid"] == "GPU-1" and out["level"] == "warning"
