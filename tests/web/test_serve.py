"""`xidpipe serve` as a command: the embedded default tokens, the tokens file from the
environment, clear errors for a missing or outdated history, and a start before the worker made
the schema (not ready until it exists, never an exit)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import sqlalchemy as sa

from history.engine import make_engine
from history.migrate import upgrade
from tests.web.conftest import READ_TOKEN, start_server
from tests.web.seed import Seeded


def get(url: str, token: str | None = None) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(10)


def test_without_tokens_it_writes_them_once_and_prints_only_the_path(seeded: Seeded, tmp_path: Path) -> None:
    db = tmp_path / "var" / "xidpipe.db"
    db.parent.mkdir()
    shutil.copyfile(seeded.url.removeprefix("sqlite:///"), db)
    env = {"XIDPIPE_DATABASE_URL": "", "XIDPIPE_WEB_TOKENS_FILE": ""}
    proc, base = start_server("sqlite:///var/xidpipe.db", None, tmp_path / "serve.log", cwd=tmp_path, extra_env=env)
    try:
        tokens = tmp_path / "var" / "api-tokens"
        assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
        log = (tmp_path / "serve.log").read_text()
        assert "wrote a read and an operator token to var/api-tokens" in log
        assert base.startswith("http://127.0.0.1:")  # local only by default
        secrets = [line.split()[2] for line in tokens.read_text().splitlines() if not line.startswith("#")]
        assert len(secrets) == 2 and not any(s in log for s in secrets)
        assert get(f"{base}/api/v1/incidents", secrets[0])[1]["total"] == 5
        assert get(f"{base}/api/v1/incidents")[0] == 401
    finally:
        stop(proc)
    # A second start keeps the tokens it wrote.
    before = tokens.read_text()
    proc, _ = start_server("sqlite:///var/xidpipe.db", None, tmp_path / "serve2.log", cwd=tmp_path, extra_env=env)
    stop(proc)
    assert tokens.read_text() == before and "wrote" not in (tmp_path / "serve2.log").read_text()


def test_the_tokens_file_from_the_environment(seeded: Seeded, tokens_file: Path, tmp_path: Path) -> None:
    proc, base = start_server(seeded.url, None, tmp_path / "serve.log", cwd=tmp_path,
                              extra_env={"XIDPIPE_WEB_TOKENS_FILE": str(tokens_file)})
    try:
        status, body = get(f"{base}/api/v1/stats", READ_TOKEN)
        assert status == 200 and body["incidents"]["total"] == 5
        assert not (tmp_path / "var").exists()
    finally:
        stop(proc)


def serve(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XIDPIPE_STARTUP_DEADLINE_S": "2", "XIDPIPE_WEB_METRICS_PORT": "0"}
    return subprocess.run([sys.executable, "-m", "xidpipe.cli", "serve", "--port", "0", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=60, check=False)


def test_a_missing_history_is_a_clear_error(tokens_file: Path, tmp_path: Path) -> None:
    proc = serve("--database-url", f"sqlite:///{tmp_path / 'none.db'}", "--tokens-file", str(tokens_file),
                 cwd=tmp_path)
    assert proc.returncode == 3 and "no incident history" in proc.stderr and "make demo" in proc.stderr


def test_an_outdated_history_says_to_upgrade(seeded: Seeded, tokens_file: Path, tmp_path: Path) -> None:
    engine = sa.create_engine(seeded.url)
    with engine.begin() as conn:
        conn.execute(sa.text("update xidpipe_streams_version set version_num = '0001'"))
    engine.dispose()
    proc = serve("--database-url", seeded.url, "--tokens-file", str(tokens_file), cwd=tmp_path)
    assert proc.returncode == 3 and "xidpipe db upgrade" in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "schema at revision 0001" in last and "past the start-up deadline of 2 s" in last, proc.stderr
    assert "Traceback" not in proc.stderr


def test_before_the_worker_made_the_schema_it_is_not_ready_then_serves(tokens_file: Path, tmp_path: Path) -> None:
    """The web pod of a fresh install starts beside the worker: it waits for the schema, ready once made."""
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    sa.create_engine(url).dispose()
    (tmp_path / "fresh.db").touch()  # the database exists, with no table yet
    proc, base = start_server(url, tokens_file, tmp_path / "serve.log", cwd=tmp_path,
                              extra_env={"XIDPIPE_LOG_FORMAT": "json"})
    try:
        status, body = get(f"{base}/readyz")
        assert status == 503 and "schema at revision none" in str(body["checks"]), body
        deadline = time.monotonic() + 30
        while "is not ready" not in (tmp_path / "serve.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        engine = make_engine(url)
        upgrade(engine)  # what the worker does at start
        engine.dispose()
        while get(f"{base}/readyz")[0] != 200 and time.monotonic() < deadline + 30:
            time.sleep(0.5)
        assert get(f"{base}/readyz")[0] == 200
        status, body = get(f"{base}/api/v1/incidents", READ_TOKEN)
        assert status == 200 and body["total"] == 0 and proc.poll() is None
        # its next check (the backoff is at most 15 s) says so in the log
        while "schema after" not in (tmp_path / "serve.log").read_text() and time.monotonic() < deadline + 60:
            time.sleep(0.5)
    finally:
        stop(proc)
    lines = [json.loads(ln) for ln in (tmp_path / "serve.log").read_text().splitlines() if ln.startswith("{")]
    waits = [ln for ln in lines if "the incident history is not ready" in ln["message"]]
    assert waits and all(w["level"] == "warning" and "retrying in" in w["message"] for w in waits), lines
    assert any("is at this xidpipe's schema after" in ln["message"] for ln in lines), lines


def test_a_bad_tokens_file_is_refused(seeded: Seeded, tmp_path: Path) -> None:
    bad = tmp_path / "tokens"
    bad.write_text("alice superuser 0123456789abcdefgh\n")
    proc = serve("--database-url", seeded.url, "--tokens-file", str(bad), cwd=tmp_path)
    assert proc.returncode == 2 and "role must be one of" in proc.stderr
    assert "0123456789abcdefgh" not in proc.stderr + proc.stdout
