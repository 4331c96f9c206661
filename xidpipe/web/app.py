"""The aiohttp application: the API, the pages and the static CSS behind two middlewares, one that
turns every error into a problem object (API) or an error page (pages), one that authenticates."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from aiohttp import web

from service.metrics import WebMetrics
from xidpipe.web import api, ops, pages
from xidpipe.web.db import Database
from xidpipe.web.guard import Proxies, Throttle, body_deadline, failed_attempt, log_text
from xidpipe.web.keys import DB_KEY, PRINCIPAL_KEY, PROXIES_KEY, SESSIONS_KEY, THROTTLE_KEY, TOKENS_KEY
from xidpipe.web.problems import Problem, unauthorized
from xidpipe.web.session import COOKIE_NAME, Sessions
from xidpipe.web.tokens import Principal, TokenStore

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_ROUTES = frozenset({"login", "login_submit", "static"}) | ops.OPS_ROUTES
CSP = ("default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def is_api(request: web.Request) -> bool:
    return request.path.startswith("/api/") or request.path in ("/healthz", "/readyz")


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except Problem as p:
        return p.response() if is_api(request) else await pages.error_page(request, p)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        detail = {404: f"no such path: {request.path[:200]}",
                  405: f"{request.method} is not allowed here"}.get(exc.status, exc.reason)
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return await _problem(request, Problem(exc.status, exc.reason, detail, headers))
    except Exception:
        log.exception("%s %s failed", request.method, log_text(request.path, 200))
        return await _problem(request, Problem(500, "Internal Server Error",
                                               "the server failed to answer; the error is in its log"))


async def _problem(request: web.Request, p: Problem) -> web.StreamResponse:
    return p.response() if is_api(request) else await pages.error_page(request, p)


def authenticate(request: web.Request) -> tuple[Principal | None, str]:
    """(principal, "bearer" | "cookie" | ""). A bearer token that is not valid is a 401 at once, and
    counts against the client (a 429 when it failed too often: see `failed_attempt`)."""
    header = request.headers.get("Authorization")
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("the Authorization header must be `Bearer <token>`")
        who = request.app[TOKENS_KEY].verify(token.strip())
        if who is None:
            failed_attempt(request, request.app[PROXIES_KEY], request.app[THROTTLE_KEY])
            raise unauthorized("the bearer token is not valid")
        return who, "bearer"
    cookie = request.cookies.get(COOKIE_NAME)
    if cookie:
        who = request.app[SESSIONS_KEY].verify(cookie)
        if who is not None:
            return who, "cookie"
    return None, ""


@web.middleware
async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    route = request.match_info.route
    if request.match_info.http_exception is not None or route.name in PUBLIC_ROUTES:
        return await handler(request)
    needs = api.required_role(request)
    if needs == "none":
        return await handler(request)
    who, via = authenticate(request)
    if who is None:
        if is_api(request):
            raise unauthorized("send `Authorization: Bearer <token>`, or log in at /login")
        raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='/')}")
    if via == "cookie" and is_api(request) and request.method not in SAFE_METHODS:
        token = request.headers.get("X-CSRF-Token", "")
        if not request.app[SESSIONS_KEY].check_csrf(request.cookies.get(COOKIE_NAME, ""), token):
            raise Problem(403, "Forbidden", "a session-authenticated change needs the page's X-CSRF-Token header")
    if needs == "operator" and not who.is_operator:
        raise Problem(403, "Forbidden", "this needs an operator token; this one is read-only")
    request[PRINCIPAL_KEY] = who
    return await handler(request)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["Server"] = "xidpipe"  # no versions of aiohttp and Python for a scanner to match
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    if not is_api(request):
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Cache-Control", "no-store")


def make_app(db: Database, tokens: TokenStore, session_secret: bytes | None = None,
             proxies: Proxies | None = None, throttle: Throttle | None = None,
             metrics: WebMetrics | None = None, body_timeout_s: float = 10.0) -> web.Application:
    """`proxies`: the reverse proxies trusted for `X-Forwarded-Proto` and `X-Forwarded-For` (default:
    none); `throttle`: failed logins and tokens allowed per client (default: 10 a minute); `metrics`:
    where requests are counted (default: a registry of its own; `xidpipe serve` serves it on its
    metrics port, not here); `body_timeout_s`: a request body's time to arrive. `xidpipe serve` gives
    them from its settings (`ServeSettings`)."""
    app = web.Application(middlewares=[ops.measured, errors, body_deadline(body_timeout_s), auth],
                          client_max_size=64 * 1024)
    app[DB_KEY] = db
    app[TOKENS_KEY] = tokens
    app[SESSIONS_KEY] = Sessions(tokens, session_secret)
    app[PROXIES_KEY] = proxies if proxies is not None else Proxies()
    app[THROTTLE_KEY] = throttle if throttle is not None else Throttle()
    api.add_routes(app)
    ops.add_routes(app, metrics)
    pages.add_routes(app)
    app.router.add_static("/static/", STATIC_DIR, name="static")
    app.on_response_prepare.append(_security_headers)
    return app
