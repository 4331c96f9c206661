"""What the web server tells its operators: the request counts behind `/metrics`
(`service.metrics.WebMetrics`: requests by route, method and status, and their duration, served by
`xidpipe serve` on its metrics port, never on the public one), and `/readyz` (the database answers at
this xidpipe's schema; 503 with the reason when not). `/healthz` (liveness) is the API's. Neither
needs a token: the kubelet's probes carry none, and they show no fleet data.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from history.database import schema_problem
from service.http import CHECK_TIMEOUT_S
from service.metrics import WebMetrics
from xidpipe.web.keys import DB_KEY

METRICS_KEY: web.AppKey[WebMetrics] = web.AppKey("metrics", WebMetrics)
OPS_ROUTES = frozenset({"readyz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def measured(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count and time every request under its route's name (not its path: ids stay out of the labels)."""
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        info = request.match_info
        route = "unmatched" if info.http_exception is not None else (info.route.name or "unnamed")
        metrics = request.app[METRICS_KEY]
        metrics.requests.labels(route, request.method, str(status)).inc()
        metrics.request_seconds.labels(route).observe(time.perf_counter() - started)


async def _readyz(request: web.Request) -> web.StreamResponse:
    db = request.app[DB_KEY]
    try:
        problem = await asyncio.wait_for(db.read(lambda s: schema_problem(db.engine)), CHECK_TIMEOUT_S)
    except TimeoutError:
        problem = f"no answer within {CHECK_TIMEOUT_S:g} s"
    except Exception as exc:
        problem = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    ok = problem is None
    return web.json_response({"ok": ok, "checks": {"database": "ok" if ok else problem}}, status=200 if ok else 503,
                             headers={"Cache-Control": "no-store"})


def add_routes(app: web.Application, metrics: WebMetrics | None) -> None:
    app[METRICS_KEY] = metrics or WebMetrics()
    app.router.add_get("/readyz", _readyz, name="readyz")
