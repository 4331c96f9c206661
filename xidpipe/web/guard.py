"""What the server does with input an attacker chooses: where a login may send the browser, what a
log line may carry, how deep a JSON body may nest, how often a client may fail to authenticate, and
which proxies are trusted to say a request came over TLS and from whom.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterable

from aiohttp import web

from xidpipe.web.problems import Problem

log = logging.getLogger(__name__)

TRUSTED_PROXIES_ENV = "XIDPIPE_WEB_TRUSTED_PROXIES"
AUTH_FAILURES_ENV = "XIDPIPE_WEB_AUTH_FAILURES_PER_MINUTE"
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

    @classmethod
    def from_environment(cls) -> Proxies:
        """From `XIDPIPE_WEB_TRUSTED_PROXIES`: addresses or networks, separated by commas."""
        return cls(os.environ.get(TRUSTED_PROXIES_ENV, "").split(","))

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
    """At most `failures` failed logins or tokens per client in any `window_s` seconds; past that the
    client is refused until its oldest failure in the window ages out. Memory is bounded: past
    `max_clients`, the client seen least recently is forgotten."""

    def __init__(self, failures: int = 10, window_s: float = 60.0, max_clients: int = 50_000) -> None:
        self.failures = failures
        self.window_s = window_s
        self.max_clients = max_clients
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    @classmethod
    def from_environment(cls) -> Throttle:
        """`XIDPIPE_WEB_AUTH_FAILURES_PER_MINUTE` failures per client per minute (default 10)."""
        text = os.environ.get(AUTH_FAILURES_ENV, "").strip()
        try:
            failures = int(text) if text else 10
        except ValueError:
            raise ValueError(f"{AUTH_FAILURES_ENV} must be a whole number, not {text[:20]!r}") from None
        if failures < 1:
            raise ValueError(f"{AUTH_FAILURES_ENV} must be at least 1")
        return cls(failures=failures, window_s=60.0)

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


def throttled(request: web.Request, proxies: Proxies, throttle: Throttle) -> str:
    """The client's address; a 429 Problem when it failed to authenticate too often of late."""
    client = proxies.client(request)
    wait = throttle.retry_after(client)
    if wait:
        log.warning("authentication attempt refused: too many failures from %s", log_text(client, 64))
        raise Problem(429, "Too Many Requests", f"too many failed logins or tokens from this address: try again "
                      f"in {wait} s", {"Retry-After": str(wait)})
    return client
