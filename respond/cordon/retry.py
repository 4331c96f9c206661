"""Retry with backoff for transient failures of cluster actions.

`call_with_retry` repeats a call while it raises `TemporaryError` (the adapter's word for HTTP 429
and 5xx, connection errors and timeouts), with exponential backoff and jitter, until a deadline;
then it raises `TemporaryError` (a later redelivery may succeed). A write the fence refused (`Fenced`)
is raised as it is; any other failure is reported at once as `PermanentError` (403 forbidden, 404
not found, 422 validation, ...).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from respond.errors import ActionError, Fenced, PermanentError, TemporaryError

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry timing for transient failures (seconds)."""

    deadline_s: float = 30.0
    initial_s: float = 0.2
    max_s: float = 5.0

    def delays(self) -> Callable[[int], float]:
        def delay(attempt: int) -> float:
            base = min(self.max_s, self.initial_s * (2**attempt))
            return float(base * (0.5 + random.random() / 2))

        return delay


def call_with_retry(
    fn: Callable[[], T],
    what: str,
    backoff: Backoff,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`fn()`, retried on `TemporaryError` until `backoff.deadline_s`; raises PermanentError or TemporaryError,
    their message prefixed with `what`."""
    deadline = clock() + backoff.deadline_s
    delay = backoff.delays()
    attempt = 0
    while True:
        try:
            return fn()
        except TemporaryError as exc:
            wait = delay(attempt)
            if clock() + wait > deadline:
                raise TemporaryError(f"{what}: still failing after {attempt + 1} attempts: {exc.message}",
                                     exc.status) from exc
            log.warning("transient failure, retrying", extra={"what": what, "attempt": attempt + 1,
                                                             "error": exc.message, "wait_s": round(wait, 3)})
            sleep(wait)
            attempt += 1
        except Fenced:
            raise
        except ActionError as exc:
            raise PermanentError(f"{what}: {exc.message}", exc.status) from exc
