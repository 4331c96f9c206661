"""Fixtures for the server tests: a seeded history (written once per session, copied per test that
changes it), a tokens file, the app in process, and the real `xidpipe serve` on a free port."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.web.seed import Seeded, seed
from xidpipe.web.app import make_app
from xidpipe.web.db import Database
from xidpipe.web.tokens import load_tokens

READ_TOKEN = "read-Jq7vXc2LmR9tKw4pZs8bNf3hYd"
OPERATOR_TOKEN = "operator-Vb6nQe1TzH8rMx5kWg3jPa7uLc"
SERVER_START_S = 30.0


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    path = tmp_path_factory.mktemp("web-history") / "history.db"
    return seed(f"sqlite:///{path}")


@pytest.fixture
def seeded(seeded_template: Seeded, tmp_path: Path) -> Seeded:
    """A copy of the seeded history this test may change."""
    src = Path(seeded_template.url.removeprefix("sqlite:///"))
    dst = tmp_path / "history.db"
    shutil.copyfile(src, dst)
    return replace(seeded_template, url=f"sqlite:///{dst}")


@pytest.fixture(scope="session")
def tokens_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web-tokens") / "api-tokens"
    path.write_text(f"# test tokens\nreader read {READ_TOKEN}\nops operator {OPERATOR_TOKEN}\n")
    path.chmod(0o600)
    return path


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


READ, OPERATOR = auth(READ_TOKEN), auth(OPERATOR_TOKEN)


@pytest.fixture
async def client(seeded: Seeded, tokens_file: Path) -> AsyncIterator[TestClient]:
    db = Database(seeded.url)
    app = make_app(db, load_tokens(tokens_file), session_secret=b"s" * 32)
    async with TestClient(TestServer(app)) as c:
        yield c
    db.close()


@dataclass(frozen=True)
class RunningServer:
    base: str
    seeded: Seeded
    log: Path


def start_server(url: str, tokens: Path | None, log: Path, cwd: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    env = {**os.environ, "XIDPIPE_WEB_METRICS_PORT": "0", **(extra_env or {})}  # metrics on any free port
    out = log.open("wb")
    args = [sys.executable, "-m", "xidpipe.cli", "serve", "--database-url", url, "--port", "0"]
    if tokens is not None:
        args += ["--tokens-file", str(tokens)]
    proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        m = re.search(r"listening on (http://\S+?)/?$", log.read_text(errors="replace"), re.M)
        if m:
            return proc, m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise AssertionError(f"xidpipe serve did not start:\n{log.read_text(errors='replace')[-2000:]}")


@pytest.fixture(scope="module")
def server(seeded_template: Seeded, tokens_file: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[RunningServer]:
    """The real `xidpipe serve` on a copy of the seeded history, on a port the kernel picked."""
    work = tmp_path_factory.mktemp("web-server")
    db = work / "history.db"
    shutil.copyfile(seeded_template.url.removeprefix("sqlite:///"), db)
    log = work / "serve.log"
    # the fuzzing sends wrong tokens on purpose: far more than the default throttle lets through
    proc, base = start_server(f"sqlite:///{db}", tokens_file, log,
                              extra_env={"XIDPIPE_WEB_AUTH_FAILURES_PER_MINUTE": "100000"})
    try:
        yield RunningServer(base, replace(seeded_template, url=f"sqlite:///{db}"), log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
