"""Browser sessions and CSRF tokens, signed with a server secret (HMAC-SHA256).

The session cookie carries the token's name, role, an expiry and a random session id, never the
token itself; the server checks the signature, that the name and role are still configured, and
that the session was not logged out: logging out revokes the session id on the server (kept until
the session would have expired), so a copy of the old cookie no longer works. A form's CSRF token
is an HMAC of the session cookie under a separate key, so it is valid only with that session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time

from xidpipe.web.tokens import Principal, TokenStore

COOKIE_NAME = "xidpipe_session"
SESSION_TTL_S = 12 * 3600  # a working day; log in again after that


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    def __init__(self, tokens: TokenStore, secret: bytes | None = None, ttl_s: int = SESSION_TTL_S) -> None:
        self.tokens = tokens
        self._secret = secret or secrets.token_bytes(32)  # a restart logs everybody out
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._revoked: dict[str, float] = {}  # session id -> when the session expires anyway

    def _mac(self, purpose: str, payload: str) -> str:
        return _b64(hmac.new(self._secret, f"{purpose}:{payload}".encode(), hashlib.sha256).digest())

    def issue(self, who: Principal, now: float | None = None) -> str:
        exp = int((now if now is not None else time.time()) + self.ttl_s)
        payload = _b64(json.dumps({"n": who.name, "r": who.role, "e": exp, "s": secrets.token_urlsafe(16)},
                                  separators=(",", ":")).encode())
        return f"{payload}.{self._mac('session', payload)}"

    def _claims(self, cookie: str, now: float | None) -> tuple[str, str, int, str] | None:
        payload, _, mac = cookie.partition(".")
        if not payload or not mac or not hmac.compare_digest(mac, self._mac("session", payload)):
            return None
        try:
            data = json.loads(_unb64(payload))
            name, role, exp, sid = str(data["n"]), str(data["r"]), int(data["e"]), str(data["s"])
        except (ValueError, KeyError, TypeError):
            return None
        if exp < (now if now is not None else time.time()):
            return None
        return name, role, exp, sid

    def verify(self, cookie: str, now: float | None = None) -> Principal | None:
        claims = self._claims(cookie, now)
        if claims is None:
            return None
        name, role, _, sid = claims
        with self._lock:
            if sid in self._revoked:
                return None
        return self.tokens.principal(name, role)

    def revoke(self, cookie: str, now: float | None = None) -> bool:
        """Log the session out for good (True when it was a valid session)."""
        now = now if now is not None else time.time()
        claims = self._claims(cookie, now)
        if claims is None:
            return False
        with self._lock:
            self._revoked = {sid: exp for sid, exp in self._revoked.items() if exp >= now}  # forget expired ones
            self._revoked[claims[3]] = claims[2]
        return True

    def csrf(self, cookie: str) -> str:
        return self._mac("csrf", cookie)

    def check_csrf(self, cookie: str, token: str) -> bool:
        return bool(cookie) and hmac.compare_digest(token.encode(), self.csrf(cookie).encode())
