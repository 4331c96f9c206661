"""The error vocabulary of cluster actions, and retry with backoff for transient failures.

Transient: HTTP 429 and 5xx, connection errors and timeouts: retried with exponential backoff
(with jitter) until a deadline. Permanent: everything else (403 forbidden, 404 not found, 422
validation, ...): reported at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class ActionError(Exception):
    """An action that could not be carried out; `status` is the HTTP status when there was one."""

    retryable = False

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class PermanentError(ActionError):
    """Retrying will not help (forbidden, not found, invalid)."""


class TemporaryError(ActionError):
    """Transient failures outlasted the retry deadline; a later redelivery may succeed."""

    retryable = True


def status_of(exc: BaseException) -> int | None:
    return int(exc.status) if isinstance(exc, ApiException) and exc.status else None


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in TRANSIENT_STATUS or not exc.status
    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}: {(exc.body or '')[:300]}".strip()
    return f"{type(exc).__name__}: {exc}"


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
    """`fn()`, retried on transient errors until `backoff.deadline_s`; raises PermanentError or TemporaryError."""
    deadline = clock() + backoff.deadline_s
    delay = backoff.delays()
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise PermanentError(f"{what}: {describe(exc)}", status_of(exc)) from exc
            wait = delay(attempt)
            if clock() + wait > deadline:
                raise TemporaryError(f"{what}: still failing after {attempt + 1} attempts: {describe(exc)}",
                                     status_of(exc)) from exc
            log.warning("transient failure, retrying", extra={"what": what, "attempt": attempt + 1,
                                                             "error": describe(exc), "wait_s": round(wait, 3)})
            sleep(wait)
            attempt += 1
