"""`xidpipe serve`: the HTTP API and the pages over the incident history, on one server.

It starts before the worker has made (or migrated) the history's schema, as the pods of a fresh
install do: the server listens at once, `/readyz` answers 503 with the reason, and the schema is
checked again with backoff (one log line per try) until the start-up deadline
(`startup_deadline_s`), then the command ends with status 3.

Facing the network (`ServeSettings`): a client has `header_timeout_s` to send a request's headers and
`body_timeout_s` its body; `/metrics` (and a `/healthz` of its own) is served on `metrics_port` only,
the public port answers 404 there; no response names a version of the server; a tokens file other
users can read is used with a warning.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import time
from pathlib import Path
from typing import Any

from xidpipe.commands.exits import EXIT_OK, Unavailable, UsageError
from xidpipe.commands.options import database_parent

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"  # ServeSettings' defaults, named in the help without importing pydantic
DEFAULT_PORT = 8780


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "serve", help="serve the HTTP API and the web pages over the incident history",
        description="Serve the JSON API (/api/v1/, OpenAPI at /api/v1/openapi.json) and the pages (incidents, "
        "GPUs, fleet heatmap) over the incident history. Tokens: --tokens-file or $XIDPIPE_WEB_TOKENS_FILE "
        "(lines `name role token`, roles read and operator); without either, var/api-tokens is used, and "
        "created once with a read and an operator token.", parents=[database_parent()])
    p.add_argument("--host", help=f"address to bind (default $XIDPIPE_WEB_HOST, else {DEFAULT_HOST})")
    p.add_argument("--port", type=int,
                   help=f"port (default $XIDPIPE_WEB_PORT, else {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--tokens-file", type=Path, help="the API tokens file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from history.database import HistoryUnavailable
    from xidpipe.commands.serve_settings import ServeSettings
    from xidpipe.commands.startup import load, start_logging, wait_for_database
    from xidpipe.web.db import Database
    from xidpipe.web.tokens import TokenFileError, ensure_default_tokens, load_tokens, tokens_file_exposure

    given = {"database_url": args.database_url, "host": args.host, "port": args.port, "tokens_file": args.tokens_file}
    settings = load(ServeSettings, **{k: v for k, v in given.items() if v is not None})
    start_logging(settings)
    path = settings.tokens_file
    try:
        if path is None:
            path, created = ensure_default_tokens()
            if created:
                print(f"xidpipe serve: wrote a read and an operator token to {path} (mode 0600)", flush=True)
        tokens = load_tokens(path)
    except (TokenFileError, OSError) as exc:
        raise UsageError(str(exc)) from None
    if not len(tokens):
        raise UsageError(f"{path} holds no tokens")
    exposure = tokens_file_exposure(path)
    if exposure is not None:
        log.warning("%s: anyone who can read it can use the tokens", exposure)
    wait_for_database(settings.database_url, settings.startup_deadline_s)
    try:
        db = Database(settings.database_url, schema_checked=False)
    except HistoryUnavailable as exc:
        raise Unavailable(str(exc)) from None
    print(f"xidpipe serve: tokens from {path}", flush=True)
    try:
        asyncio.run(_serve(db, tokens, settings))
    finally:
        db.close()
    return EXIT_OK


async def _schema_problem(db: Any) -> str | None:
    """None when the history is at this xidpipe's schema, else why not (one line)."""
    from history.database import schema_problem
    from service.startup import one_line

    try:
        problem: str | None = await db.read(lambda s: schema_problem(db.engine))
    except Exception as exc:  # the database went away again: an OperationalError, one line
        return one_line(exc)
    return problem


async def _await_schema(db: Any, deadline_s: float, stop: asyncio.Event) -> None:
    """Check the history's schema until it is this xidpipe's (the worker makes and migrates it), with
    the start-up backoff and one log line per try; past `deadline_s` (0: never) `Unavailable`."""
    from service.startup import StartupBackoff, next_try

    backoff, started, failures = StartupBackoff(), time.monotonic(), 0
    while not stop.is_set():
        problem = await _schema_problem(db)
        if problem is None:
            if failures:
                log.info("the incident history is at this xidpipe's schema after %d tries", failures + 1)
            return
        failures += 1
        delay, why = next_try(failures, time.monotonic() - started, deadline_s, backoff)
        if delay is None:
            raise Unavailable(f"the incident history was not ready: {why}: {problem} (the worker makes and "
                              "migrates it at start; or run `xidpipe db upgrade`)")
        log.warning("the incident history is not ready: %s; %s", problem, why,
                    extra={"dependency": "incident history", "attempt": failures, "retry_in_s": round(delay, 3)})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)


def app_runner(app: Any, settings: Any) -> Any:
    """The aiohttp runner of `app` with the settings' request-header timeout: aiohttp's keep-alive timer
    runs from the connection's start and from the end of each response, and closes a connection whose
    next request's headers are not complete by then (its default, an hour, kept half-sent requests open).
    After a 408 for a body that did not arrive, what is left of it is read and dropped for at most
    `body_timeout_s` more (aiohttp's lingering time, 10 s by default), then the connection is closed."""
    from aiohttp import web

    from xidpipe.web.access_log import PathAccessLogger

    # One access-log line per request, through the service's log handler, without the query string.
    return web.AppRunner(app, access_log=logging.getLogger("aiohttp.access"), access_log_class=PathAccessLogger,
                         keepalive_timeout=settings.header_timeout_s, lingering_time=settings.body_timeout_s)


def _metrics_endpoint(settings: Any, metrics: Any) -> Any:
    """`/metrics` and `/healthz` on the metrics port (None when off)."""
    from service.http import EndpointServer

    if settings.metrics_port is None:
        return None
    try:
        endpoint = EndpointServer(settings.metrics_host, settings.metrics_port, metrics.registry,
                                  live=lambda: {"ok": True})
    except OSError as exc:
        raise Unavailable(f"cannot serve /metrics on {settings.metrics_host}:{settings.metrics_port}: "
                          f"{exc.strerror or exc} (XIDPIPE_WEB_METRICS_PORT; 0: any free port)") from None
    return endpoint.start()


async def _serve(db: Any, tokens: Any, settings: Any) -> None:
    from aiohttp import web

    from service.metrics import WebMetrics
    from xidpipe.web.app import make_app
    from xidpipe.web.guard import Proxies, Throttle

    metrics = WebMetrics()
    app = make_app(db, tokens, proxies=Proxies(settings.trusted_proxies), metrics=metrics,
                   throttle=Throttle(failures=settings.auth_failures_per_minute, window_s=60.0),
                   body_timeout_s=settings.body_timeout_s)
    runner = app_runner(app, settings)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    bound = runner.addresses[0] if runner.addresses else (settings.host, settings.port)
    shown = f"[{bound[0]}]" if ":" in str(bound[0]) else bound[0]
    print(f"xidpipe serve: listening on http://{shown}:{bound[1]}/", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    endpoint = None
    try:
        endpoint = _metrics_endpoint(settings, metrics)
        await _await_schema(db, settings.startup_deadline_s, stop)  # /readyz says 503 and why meanwhile
        await stop.wait()
    finally:
        if endpoint is not None:
            endpoint.stop()
        await runner.cleanup()
