"""What the server does with input an attacker chooses: where a login may send the browser, what a
log line may carry, how deep a JSON body may nest, how long a body may take to arrive, how often a
client may fail to authenticate, and which proxies are trusted to say a request came over TLS and from
whom (`xidpipe.commands.serve_settings.ServeSettings`: `trusted_proxies`, `auth_failures_per_minute`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware

from xidpipe.web.problems import Problem

log = logging.getLogger(__name__)

DEFAULT_NEXT = "/incidents"
MAX_JSON_DEPTH = 32

# A local path and query, in the characters a URL may carry unencoded: no control character, space,
# backslash or non-ASCII letter, which browsers drop or rewrite (`/\t/evil.example` becomes
# `//evil.example`, another origin), and no second `/` or `\` at the start.
_LOCAL_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9\-._~!$&'()*+,;=:@%/?]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\\]")


def safe_next(value: str | None) -> str:
    """`value` when it is a path on this server, else the incidents page."""
    if value and len(value) <= 2048 and _LOCAL_PATH.fullmatch(value):
        return value
    return DEFAULT_NEXT


def log_text(value: str, limit: int = 500) -> str:
    """`value` safe for one log line: CR, LF, other control characters and backslashes escaped."""
    escaped = _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), value[:limit])
    return escaped + ("..." if len(value) > limit else "")


def json_depth_ok(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """False when arrays and objects in `raw` nest deeper than `limit` (checked before parsing, in
    one pass: the parser itself would recurse once per level)."""
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return False
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return True


class Proxies:
    """The reverse proxies trusted to terminate TLS and forward requests (`X-Forwarded-Proto`,
    `X-Forwarded-For`); from anyone else those headers are ignored."""

    def __init__(self, networks: Iterable[str] = ()) -> None:
        self.networks = tuple(ipaddress.ip_network(n.strip(), strict=False) for n in networks if n.strip())

    def trusts(self, address: str | None) -> bool:
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            return False
        return any(ip in n for n in self.networks)

    def secure(self, request: web.Request) -> bool:
        """Whether the browser reached us over TLS: directly, or through a trusted proxy that says so."""
        if request.secure:
            return True
        proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return self.trusts(request.remote) and proto == "https"

    def client(self, request: web.Request) -> str:
        """The client's address: the peer, or behind trusted proxies the last address they forwarded
        that is not one of them."""
        peer = request.remote or "?"
        if not self.trusts(peer):
            return peer
        hops = [h.strip() for h in request.headers.get("X-Forwarded-For", "").split(",") if h.strip()]
        for hop in reversed(hops):
            if not self.trusts(hop):
                return hop[:64]
        return peer


class Throttle:
    """At most `failures` failed logins or tokens per client in any `window_s` seconds; past that each
    attempt of the client that fails is refused (429) until its oldest failure in the window ages out,
    while a right token is still served: every client behind one address (an ingress without trusted
    proxies, a NAT) shares its failures but not a lockout, and tokens carry 128 bits, so guessing is not
    what the throttle stops. Memory is bounded: past `max_clients`, the client seen least recently is
    forgotten."""

    def __init__(self, failures: int = 10, window_s: float = 60.0, max_clients: int = 50_000) -> None:
        self.failures = failures
        self.window_s = window_s
        self.max_clients = max_clients
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str, now: float | None = None) -> int:
        """0 when `client` may try now, else the seconds until it may."""
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._seen.get(client)
            if times is None:
                return 0
            while times and times[0] <= now - self.window_s:
                times.popleft()
            if len(times) < self.failures:
                return 0
            return max(1, int(times[0] + self.window_s - now + 0.999))

    def failed(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            times = self._seen.pop(client, None) or deque(maxlen=self.failures)
            times.append(now)
            self._seen[client] = times
            while len(self._seen) > self.max_clients:
                self._seen.popitem(last=False)


def failed_attempt(request: web.Request, proxies: Proxies, throttle: Throttle) -> str:
    """Count a failed login or token against the request's client and return the client's address; a
    429 Problem instead when the client failed too often of late."""
    client = proxies.client(request)
    wait = throttle.retry_after(client)
    if wait:
        log.warning("authentication attempt refused: too many failures from %s", log_text(client, 64))
        raise Problem(429, "Too Many Requests", f"too many failed logins or tokens from this address: try again "
                      f"in {wait} s", {"Retry-After": str(wait)})
    throttle.failed(client)
    return client


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def body_deadline(timeout_s: float) -> Middleware:
    """A middleware that reads a request's body within `timeout_s` (a 408, and the connection closed, past
    it) before any handler, which then finds it read: a client sending a body slowly holds nothing long."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists:
            try:
                await asyncio.wait_for(request.read(), timeout_s)
            except TimeoutError:
                log.info("request body from %s not received within %g s", log_text(request.remote or "?", 64),
                         timeout_s)
                response = Problem(408, "Request Timeout", f"the request body did not arrive within {timeout_s:g} s"
                                   ).response()
                response.force_close()
                return response
        return await handler(request)

    return middleware
