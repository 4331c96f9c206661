"""`xidpipe serve` facing the network: its trusted proxies and throttle come from its settings model,
half-sent requests are cut off, `/metrics` is on the metrics port only, no response names a version,
and a tokens file others can read is said to be so."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from service.config import ConfigError
from service.http import EndpointServer
from tests.web.conftest import READ_TOKEN, start_server
from tests.web.seed import Seeded
from xidpipe.commands.serve import app_runner
from xidpipe.commands.serve_settings import ServeSettings
from xidpipe.web.app import make_app
from xidpipe.web.db import Database
from xidpipe.web.tokens import load_tokens


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_trusted_proxies_and_the_throttle_are_settings_of_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XIDPIPE_WEB_TRUSTED_PROXIES", "10.0.0.0/8, 192.0.2.7")
    monkeypatch.setenv("XIDPIPE_WEB_AUTH_FAILURES_PER_MINUTE", "25")
    settings = ServeSettings()
    assert settings.trusted_proxies == ["10.0.0.0/8", "192.0.2.7"] and settings.auth_failures_per_minute == 25
    assert ServeSettings(trusted_proxies=["fd00::/8"]).trusted_proxies == ["fd00::/8"]
    monkeypatch.setenv("XIDPIPE_WEB_TRUSTED_PROXIES", "10.0.0.0/8,ingress.example")
    with pytest.raises((ConfigError, ValueError), match="trusted_proxies"):
        ServeSettings()
    monkeypatch.delenv("XIDPIPE_WEB_TRUSTED_PROXIES")
    assert ServeSettings().trusted_proxies == []


def test_config_show_lists_the_web_servers_network_settings(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "xidpipe.cli", "config", "show"], capture_output=True, text=True,
                          timeout=60, check=False, cwd=tmp_path,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("XIDPIPE_")},
                               "XIDPIPE_WEB_TRUSTED_PROXIES": "10.1.0.0/16"})
    assert proc.returncode == 0, proc.stderr
    for name in ("web_trusted_proxies", "web_auth_failures_per_minute", "web_header_timeout_s",
                 "web_body_timeout_s", "web_metrics_host", "web_metrics_port"):
        assert name in proc.stdout, name
    assert "10.1.0.0/16" in proc.stdout


@pytest.fixture
async def served(seeded: Seeded, tokens_file: Path) -> AsyncIterator[tuple[int, web.AppRunner]]:
    """The app behind the runner `xidpipe serve` makes, with one-second header and body timeouts."""
    db = Database(seeded.url)
    settings = ServeSettings(header_timeout_s=1.0, body_timeout_s=1.0)
    runner = app_runner(make_app(db, load_tokens(tokens_file), session_secret=b"s" * 32,
                                 body_timeout_s=settings.body_timeout_s), settings)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1], runner
    finally:
        await runner.cleanup()
        db.close()


async def _closed_by_server(reader: asyncio.StreamReader, within_s: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(65536), within_s) == b""
    except (TimeoutError, ConnectionError):
        return False


async def test_half_sent_request_headers_are_cut_off(served: tuple[int, web.AppRunner]) -> None:
    port, _ = served
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(300)]
    for _, writer in conns:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # never finished
    started = time.monotonic()
    closed = await asyncio.gather(*(_closed_by_server(reader, 5.0) for reader, _ in conns))
    assert all(closed) and time.monotonic() - started < 4.0, closed.count(False)
    for _, writer in conns:
        writer.close()
    # A connection that sends its request in time is served.
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 200")
    writer.close()


async def test_a_body_that_does_not_arrive_is_a_408(served: tuple[int, web.AppRunner]) -> None:
    port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                 b"Content-Length: 1000\r\n\r\ntoken=abc")
    started = time.monotonic()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 2.5, answer[:200]
    assert b"connection: close" in answer.lower()
    await asyncio.wait_for(reader.read(), 5)  # then closed, the rest of the body no longer awaited
    assert time.monotonic() - started < 4.0
    writer.close()


async def test_no_response_names_a_version(served: tuple[int, web.AppRunner]) -> None:
    port, _ = served
    for request in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                    b"POST /api/v1/incidents HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        head = (await asyncio.wait_for(reader.read(), 5)).split(b"\r\n\r\n", 1)[0].decode().lower()
        writer.close()
        assert "aiohttp" not in head and "python" not in head, head
        assert "server:" not in head or "server: xidpipe\r" in head + "\r", head
    endpoint = EndpointServer("127.0.0.1", 0, CollectorRegistry(), live=lambda: {"ok": True}).start()
    try:
        _, headers, _ = get(f"http://127.0.0.1:{endpoint.port}/healthz")
        assert "Python" not in headers.get("Server", "") and "BaseHTTP" not in headers.get("Server", "")
    finally:
        endpoint.stop()


def test_metrics_are_on_the_metrics_port_only(seeded: Seeded, tokens_file: Path, tmp_path: Path) -> None:
    metrics_port = free_port()
    proc, base = start_server(seeded.url, tokens_file, tmp_path / "serve.log",
                              extra_env={"XIDPIPE_WEB_METRICS_PORT": str(metrics_port)})
    try:
        assert get(f"{base}/api/v1/incidents", READ_TOKEN)[0] == 200
        assert get(f"{base}/metrics")[0] == 404  # not on the public port, with or without a token
        assert get(f"{base}/metrics", READ_TOKEN)[0] == 404
        status, _, body = get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert status == 200 and b'xidpipe_web_requests_total{method="GET",route="listIncidents",status="200"} 1.0' \
            in body
        assert get(f"http://127.0.0.1:{metrics_port}/healthz")[0] == 200
        assert get(f"{base}/readyz")[0] == 200  # the kubelet's probe stays on the public port
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_tokens_file_others_can_read_is_used_with_a_warning(seeded: Seeded, tmp_path: Path) -> None:
    tokens = tmp_path / "api-tokens"
    tokens.write_text(f"reader read {READ_TOKEN}\n")
    tokens.chmod(0o644)
    log = tmp_path / "serve.log"
    proc, base = start_server(seeded.url, tokens, log, extra_env={"XIDPIPE_WEB_METRICS_PORT": "0"})
    try:
        assert get(f"{base}/api/v1/incidents", READ_TOKEN)[0] == 200
    finally:
        proc.terminate()
        proc.wait(10)
    text = log.read_text()
    assert "readable by every user" in text and str(tokens) in text and READ_TOKEN not in text


def test_a_metrics_port_in_use_is_one_line_and_status_3(seeded: Seeded, tokens_file: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "xidpipe.cli", "serve", "--database-url", seeded.url, "--port",
                               "0", "--tokens-file", str(tokens_file)], capture_output=True, text=True, timeout=60,
                              check=False, cwd=tmp_path, env={**os.environ, "XIDPIPE_WEB_METRICS_PORT": str(port)})
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in proc.stderr.strip().splitlines()[-1]
