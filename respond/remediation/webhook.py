"""The hand-off webhook: a site whose reboots or resets go through its own tooling (a BMC, a cloud
API) is POSTed a JSON request per hand-off (`models.remediation_jobs.handoff_request`, with its key:
a repeat of the same request is idempotent for the receiver). Answered with a 2xx it is delivered; a
timeout, a connection error or a 5xx is retried by the loop's next pass (`TemporaryError`), another
status is refused (`PermanentError`). The site reports the outcome by annotating the node
(`xidpipe.io/remediation-result`), or, for a reboot, by the node coming back with a new boot ID.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from respond.errors import PermanentError, TemporaryError

TIMEOUT_S = 10.0


def post_handoff(url: str, body: str, key: str, timeout_s: float = TIMEOUT_S) -> int:
    """POST the request; its HTTP status (2xx)."""
    request = urllib.request.Request(url, data=body.encode(), method="POST", headers={
        "Content-Type": "application/json", "Idempotency-Key": key, "User-Agent": "xidpipe-remediation"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        if exc.code >= 500 or exc.code == 429:
            raise TemporaryError(f"hand-off webhook answered HTTP {exc.code}", exc.code) from None
        raise PermanentError(f"hand-off webhook refused the request: HTTP {exc.code}", exc.code) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise TemporaryError(f"hand-off webhook unreachable: {type(exc).__name__}") from None
