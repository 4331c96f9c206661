"""An unreachable Kafka, database or API server at start: one-line retry messages, then one line and
exit status 3 after the start-up deadline, never a traceback; and a Kafka that comes up late is used."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DEADLINE_S = "2"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_") or k.startswith("XIDPIPE_TEST_")}
    env.update({"XIDPIPE_STARTUP_DEADLINE_S": DEADLINE_S, "XIDPIPE_LOG_FORMAT": "json", **extra})
    return env


def xidpipe(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", *args], cwd=cwd, env=base_env(**env),
                          capture_output=True, text=True, timeout=180, check=False)


def check_gave_up(proc: subprocess.CompletedProcess[str], command: str, dependency: str) -> None:
    """Retry lines (JSON, one per try), then one error line and status 3."""
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    retries = [json.loads(ln) for ln in lines if ln.startswith("{")]
    assert retries and all(r["level"] == "warning" and "unreachable" in r["message"] for r in retries)
    assert all(dependency in r["message"] and "retrying in" in r["message"] for r in retries)
    assert [r["attempt"] for r in retries] == list(range(1, len(retries) + 1))
    last = lines[-1]
    assert last.startswith(f"xidpipe {command}: {dependency}") and "past the start-up deadline of 2 s" in last
    assert not [ln for ln in lines if not ln.startswith("{") and ln != last and "wrote a read" not in ln], lines


def test_worker_without_kafka(tmp_path: Path) -> None:
    port = closed_port()
    proc = xidpipe("worker", "--bootstrap-servers", f"127.0.0.1:{port}", "--database-url",
                   f"sqlite:///{tmp_path / 'w.db'}", cwd=tmp_path)
    check_gave_up(proc, "worker", f"Kafka at 127.0.0.1:{port}")


def test_worker_without_its_database(tmp_path: Path) -> None:
    port = closed_port()
    url = f"postgresql+psycopg://xidpipe:s3cret-pw@127.0.0.1:{port}/xidpipe"
    proc = xidpipe("worker", "--database-url", url, cwd=tmp_path)
    check_gave_up(proc, "worker", "database postgresql+psycopg://xidpipe:")
    assert "s3cret-pw" not in proc.stderr  # the URL's password is never written


def test_respond_without_kafka(tmp_path: Path) -> None:
    port = closed_port()
    proc = xidpipe("respond", cwd=tmp_path, XIDPIPE_BOOTSTRAP_SERVERS=f"127.0.0.1:{port}",
                   XIDPIPE_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}", XIDPIPE_SINKS_OUTBOX_DIR=str(tmp_path / "o"))
    check_gave_up(proc, "respond", f"Kafka at 127.0.0.1:{port}")


def test_serve_without_its_database(tmp_path: Path) -> None:
    port = closed_port()
    proc = xidpipe("serve", "--port", "0", "--database-url", f"postgresql+psycopg://u:pw@127.0.0.1:{port}/x",
                   cwd=tmp_path)
    check_gave_up(proc, "serve", "database postgresql+psycopg://u:")


def test_node_release_without_the_api_server(tmp_path: Path) -> None:
    port = closed_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k",
                      "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "abc"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    proc = xidpipe("node", "release", "gpu-1", "--reason", "repaired", "--kubeconfig", str(kubeconfig),
                   "--action-log", str(tmp_path / "actions.jsonl"), cwd=tmp_path)
    check_gave_up(proc, "node", f"Kubernetes API server https://127.0.0.1:{port}")


class LateProxy:
    """A TCP forwarder to `target` that starts listening only when `open()` is called: a Kafka
    bootstrap address that comes up late."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.port = closed_port()
        self._server: socket.socket | None = None

    def open(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
def late_kafka(kafka_bootstrap: str) -> Iterator[LateProxy]:
    proxy = LateProxy(kafka_bootstrap.split(",")[0])
    yield proxy
    proxy.close()


def _wait_for_line(lines: list[str], needle: str, deadline_s: float) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for line in list(lines):
            if needle in line:
                return line
        time.sleep(0.05)
    raise AssertionError(f"no line with {needle!r} within {deadline_s} s: {lines[-20:]}")


def test_respond_recovers_when_kafka_comes_up_late(tmp_path: Path, late_kafka: LateProxy,
                                                   kafka_bootstrap: str) -> None:
    from kafka import KafkaAdminClient

    prefix = f"late-{os.getpid()}-{int(time.time())}."
    env = base_env(XIDPIPE_STARTUP_DEADLINE_S="120", XIDPIPE_BOOTSTRAP_SERVERS=f"127.0.0.1:{late_kafka.port}",
                   XIDPIPE_TOPIC_PREFIX=prefix, XIDPIPE_PARTITIONS="1",
                   XIDPIPE_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}", XIDPIPE_SINKS_OUTBOX_DIR=str(tmp_path / "o"),
                   XIDPIPE_RESPOND_METRICS_PORT="0")
    proc = subprocess.Popen([sys.executable, "-m", "xidpipe.cli", "respond"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        _wait_for_line(lines, "retrying in", 60)
        late_kafka.open()
        recovered = json.loads(_wait_for_line(lines, "reachable after", 60))
        assert recovered["level"] == "info" and f"127.0.0.1:{late_kafka.port}" in recovered["message"]
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, client_id="xidpipe-tests")
        try:
            end = time.monotonic() + 60
            while not any(t.startswith(prefix) for t in admin.list_topics()):  # it went on: created its topics
                assert time.monotonic() < end and proc.poll() is None, lines
                time.sleep(0.2)
        finally:
            admin.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=5)
    assert not any("Traceback" in ln for ln in lines), lines


@pytest.mark.parametrize(("env", "expected"), [
    ({"XIDPIPE_PARTITIONS": "many"}, "xidpipe respond: bad configuration (RespondSettings): XIDPIPE_PARTITIONS:"),
    ({"XIDPIPE_KUBE_CONFIG": "in-cluster"},
     "xidpipe respond: cannot load the cluster configuration (XIDPIPE_KUBE_CONFIG=in-cluster):"),
    ({"XIDPIPE_RESPOND_CLUSTER": "prod"}, "xidpipe respond: bad configuration: XIDPIPE_RESPOND_CLUSTER was removed"),
])
def test_a_bad_setting_is_one_line_and_status_2(tmp_path: Path, env: dict[str, str], expected: str) -> None:
    proc = xidpipe("respond", cwd=tmp_path, XIDPIPE_DATABASE_URL=f"sqlite:///{tmp_path / 'r.db'}",
                   KUBERNETES_SERVICE_HOST="", **env)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(expected), proc.stderr
