"""JSON over HTTP for the paging destinations (the standard library's client: a POST is one short
request, and the destination's answer maps onto the error vocabulary of `respond.errors`):

- 2xx: delivered; the parsed body comes back;
- 429, 5xx: `TemporaryError`, with the `Retry-After` seconds when the answer gives them;
- another status: `PermanentError`, with the destination's own error text (secrets scrubbed);
- a timeout after the request went out: `AmbiguousError` (it may have arrived; every paging event
  is safe to repeat), a connection refused or a name that does not resolve: `TemporaryError`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from respond.errors import AmbiguousError, PermanentError, TemporaryError, scrub

USER_AGENT = "xidpipe-pages"
ERROR_TEXT_CAP = 500


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def post_json(url: str, body: bytes, *, what: str, timeout_s: float, headers: Mapping[str, str] | None = None,
              secrets: Sequence[str | None] = ()) -> tuple[int, Any]:
    """POST `body` (JSON unless `headers` says otherwise); (status, parsed JSON body or None)."""
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": USER_AGENT, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), _parsed(response.read())
    except urllib.error.HTTPError as exc:
        text = scrub(exc.read().decode("utf-8", "replace")[:ERROR_TEXT_CAP], secrets)
        message = f"{what} answered HTTP {exc.code}: {text}".strip()
        if exc.code == 429 or exc.code >= 500:
            raise TemporaryError(message, exc.code, _retry_after(exc.headers.get("Retry-After"))) from None
        raise PermanentError(message, exc.code) from None
    except TimeoutError as exc:
        raise AmbiguousError(f"{what}: no answer within {timeout_s:g} s ({type(exc).__name__})") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TemporaryError(f"{what} unreachable: {scrub(str(reason), secrets)}") from None


def _parsed(data: bytes) -> Any:
    try:
        return json.loads(data) if data.strip() else None
    except ValueError:
        return None
