"""One logging setup: JSON lines off a terminal, text on one, the level from the settings, secrets
never written, and Faust's worker and the web server's access log through the same handler."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.logs import configure_logging, level_name, logging_config, resolve_format

SECRETS = ("hunter2-db", "tok-3f9a1c77e2", "xoxb-1234567890-abcdef", "s3cret-sasl")


@pytest.fixture(autouse=True)
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_time_level_logger_message_and_context() -> None:
    out = io.StringIO()
    configure_logging("info", "json", out)
    log = logging.getLogger("streams.intake")
    log.info("incident %s opened", "inc-1", extra={"node": "gpu-7", "xid": 79, "gpu": None})
    log.debug("not at info")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("handling failed", extra={"incident": "inc-1"})
    first, second = lines(out)
    assert list(first)[:4] == ["time", "level", "logger", "message"]
    assert (first["level"], first["logger"], first["message"]) == ("info", "streams.intake", "incident inc-1 opened")
    assert (first["node"], first["xid"], first["gpu"]) == ("gpu-7", 79, None)
    assert str(first["time"]).endswith("+00:00")
    assert second["level"] == "error" and "RuntimeError: boom" in str(second["exc"])


def test_text_on_a_terminal_json_elsewhere() -> None:
    main, other = pty.openpty()
    try:
        with os.fdopen(other, "w", closefd=False) as tty:
            assert resolve_format("auto", tty) == "text"
        assert resolve_format("auto", io.StringIO()) == "json"
        assert resolve_format("json", None) == "json" and resolve_format("text", io.StringIO()) == "text"
    finally:
        os.close(main)
        os.close(other)
    out = io.StringIO()
    configure_logging("info", "text", out)
    logging.getLogger("respond").warning("cordon held", extra={"node": "gpu-7"})
    [line] = out.getvalue().splitlines()
    assert " WARNING respond: cordon held  node=gpu-7" in line and not line.startswith("{")
    with pytest.raises(ValueError, match="log format 'xml'"):
        resolve_format("xml")


@pytest.mark.parametrize(("given", "name"), [("warn", "WARNING"), ("crit", "CRITICAL"), ("Info", "INFO"),
                                             ("debug", "DEBUG"), (logging.ERROR, "ERROR")])
def test_level_names(given: str | int, name: str) -> None:
    assert level_name(given) == name


def test_a_bad_level_is_refused() -> None:
    with pytest.raises(ValueError, match="log level 'loud'"):
        level_name("loud")


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_secrets_are_never_written(fmt: str) -> None:
    from pydantic import SecretStr

    from respond.settings import RespondSettings

    out = io.StringIO()
    configure_logging("debug", fmt, out)
    log = logging.getLogger("xidpipe.test")
    settings = RespondSettings(security_protocol="SASL_SSL", sasl_username="responder",
                               sasl_password=SecretStr("s3cret-sasl"))
    log.info("settings %s", settings)
    log.warning("cannot open postgresql+psycopg://xidpipe:hunter2-db@db:5432/x",
                extra={"url": "postgresql://u:hunter2-db@h/x", "header": "Authorization: Bearer tok-3f9a1c77e2"})
    try:
        raise ConnectionError("slack said no to token=xoxb-1234567890-abcdef")
    except ConnectionError:
        log.exception("send failed")
    text = out.getvalue()
    assert "[REDACTED]" in text and "cannot open postgresql+psycopg://xidpipe:" in text
    for secret in SECRETS:
        assert secret not in text


def test_the_dictconfig_for_faust_installs_the_same_handler(capsys: pytest.CaptureFixture[str]) -> None:
    """What faust.Worker does with `logging_config` (mode.utils.logging.setup_logging), on our config."""
    from mode.utils.logging import setup_logging

    setup_logging(loglevel="INFO", logging_config=logging_config("info", "json"))
    logging.getLogger("faust.worker").info("worker ready", extra={"app": "x"})
    logging.getLogger("faust.worker").debug("not at info")
    [line] = [json.loads(ln) for ln in capsys.readouterr().err.splitlines()]
    assert (line["logger"], line["message"], line["app"]) == ("faust.worker", "worker ready", "x")


def test_log_level_from_the_environment(tmp_path: Path) -> None:
    """XIDPIPE_LOG_LEVEL=error keeps the start-up retry warnings out; the final line still comes."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_") or k.startswith("XIDPIPE_TEST_")}
    env.update(XIDPIPE_LOG_LEVEL="error", XIDPIPE_STARTUP_DEADLINE_S="1", XIDPIPE_BOOTSTRAP_SERVERS=f"127.0.0.1:{port}")
    proc = subprocess.run([sys.executable, "-m", "xidpipe.cli", "worker", "--database-url",
                           f"sqlite:///{tmp_path / 'w.db'}"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "past the start-up deadline" in proc.stderr


def _read_until(path: Path, predicate: object, deadline_s: float, proc: subprocess.Popen[bytes]) -> list[dict]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        parsed = [json.loads(ln) for ln in path.read_text().splitlines() if ln.startswith("{")]
        if callable(predicate) and any(predicate(p) for p in parsed):
            return parsed
        assert proc.poll() is None, path.read_text()[-3000:]
        time.sleep(0.2)
    raise AssertionError(path.read_text()[-3000:])


def test_the_faust_worker_logs_json_lines(tmp_path: Path, kafka_bootstrap: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_") or k.startswith("XIDPIPE_TEST_")}
    env.update(XIDPIPE_LOG_FORMAT="json", XIDPIPE_BOOTSTRAP_SERVERS=kafka_bootstrap,
               XIDPIPE_TOPIC_PREFIX=f"logs-{os.getpid()}-{int(time.time())}.", XIDPIPE_PARTITIONS="1",
               XIDPIPE_WORKER_METRICS_PORT="0", XIDPIPE_WORKER_STORE_PROCESS="false")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "xidpipe.cli", "worker", "--database-url",
                                 f"sqlite:///{tmp_path / 'w.db'}", "--datadir", str(tmp_path / "faust"),
                                 "--app-id", f"logs-{os.getpid()}"], env=env, cwd=tmp_path, stdout=out, stderr=out)
        try:
            _read_until(log, lambda p: str(p.get("logger", "")).startswith(("faust", "mode")), 120, proc)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = [ln for ln in log.read_text().splitlines() if ln.strip()]
    not_json = [ln for ln in text if not ln.startswith("{")]
    assert not not_json, not_json[:10]
    assert {json.loads(ln)["logger"].split(".")[0] for ln in text} >= {"faust"}


def test_the_web_servers_access_log_goes_through_it(tmp_path: Path) -> None:
    from history.engine import make_engine
    from history.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'h.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"reader read {secrets.token_urlsafe(32)}\n")
    tokens.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_") or k.startswith("XIDPIPE_TEST_")}
    env.update(XIDPIPE_LOG_FORMAT="json", XIDPIPE_WEB_METRICS_PORT="0")
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "xidpipe.cli", "serve", "--database-url", url, "--port", "0",
                                 "--tokens-file", str(tokens)], env=env, cwd=tmp_path, stdout=out, stderr=out)
        try:
            end = time.monotonic() + 60
            while "listening on" not in log.read_text():
                assert time.monotonic() < end and proc.poll() is None, log.read_text()
                time.sleep(0.1)
            base = log.read_text().split("listening on ", 1)[1].split()[0].rstrip("/")
            import urllib.error
            import urllib.request

            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(f"{base}/api/v1/incidents?access_token=tok-3f9a1c77e2&node=gpu-quiet-17",
                                       timeout=10)
            parsed = _read_until(log, lambda p: p.get("logger") == "aiohttp.access", 30, proc)
        finally:
            proc.terminate()
            proc.wait(30)
    [access] = [p for p in parsed if p.get("logger") == "aiohttp.access"]
    assert access["level"] == "info" and "GET /api/v1/incidents" in str(access["message"]) and " 401 " in str(
        access["message"])
    assert "tok-3f9a1c77e2" not in log.read_text()
    # The path, never the query string (docs/api.md): what was searched for stays out of the log.
    assert '"GET /api/v1/incidents" 401 ' in str(access["message"]) and "gpu-quiet-17" not in log.read_text()
