"""Browser sessions and CSRF tokens, signed with a server secret (HMAC-SHA256).

The session cookie carries the token's name, role and an expiry, never the token itself; the
server checks the signature and that the name and role are still configured. A form's CSRF token
is an HMAC of the session cookie under a separate key, so it is valid only with that session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
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

    def _mac(self, purpose: str, payload: str) -> str:
        return _b64(hmac.new(self._secret, f"{purpose}:{payload}".encode(), hashlib.sha256).digest())

    def issue(self, who: Principal, now: float | None = None) -> str:
        exp = int((now if now is not None else time.time()) + self.ttl_s)
        payload = _b64(json.dumps({"n": who.name, "r": who.role, "e": exp}, separators=(",", ":")).encode())
        return f"{payload}.{self._mac('session', payload)}"

    def verify(self, cookie: str, now: float | None = None) -> Principal | None:
        payload, _, mac = cookie.partition(".")
        if not payload or not mac or not hmac.compare_digest(mac, self._mac("session", payload)):
            return None
        try:
            data = json.loads(_unb64(payload))
            name, role, exp = str(data["n"]), str(data["r"]), int(data["e"])
        except (ValueError, KeyError, TypeError):
            return None
        if exp < (now if now is not None else time.time()):
            return None
        return self.tokens.principal(name, role)

    def csrf(self, cookie: str) -> str:
        return self._mac("csrf", cookie)

    def check_csrf(self, cookie: str, token: str) -> bool:
        return bool(cookie) and hmac.compare_digest(token.encode(), self.csrf(cookie).encode())
