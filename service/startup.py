"""Waiting for a dependency at start-up: one log line per failed try, capped exponential backoff, and
a deadline after which the service gives up with one line (`StartupTimeout`), never a traceback.

A service started by an orchestrator often comes up before its Kafka, database or API server; it
retries for `startup_deadline_s` (`service.config.ServiceSettings`; 0: for ever), then exits with
the status for an unavailable dependency so the orchestrator restarts it and an operator sees why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


class StartupTimeout(RuntimeError):
    """A dependency stayed unreachable past the start-up deadline; the message is one line."""


@dataclass(frozen=True, slots=True)
class StartupBackoff:
    initial_s: float = 0.5
    max_s: float = 15.0

    def delay_s(self, failures: int) -> float:
        """The wait after `failures` failed tries (1: the first), doubling up to `max_s`."""
        return float(min(self.max_s, self.initial_s * 2 ** max(0, min(failures - 1, 30))))


def next_try(failures: int, elapsed_s: float, deadline_s: float, backoff: StartupBackoff) -> tuple[float | None, str]:
    """Whether to try again after `failures` failed tries, `elapsed_s` into start-up: the delay (None:
    give up) and the reason."""
    if deadline_s > 0 and elapsed_s >= deadline_s:
        return None, f"unreachable for {elapsed_s:.0f} s, past the start-up deadline of {deadline_s:g} s"
    delay = backoff.delay_s(failures)
    if deadline_s > 0:
        delay = min(delay, deadline_s - elapsed_s)
    left = f" (deadline in {deadline_s - elapsed_s:.0f} s)" if deadline_s > 0 else ""
    return delay, f"retrying in {delay:.1f} s{left}"


def one_line(exc: BaseException) -> str:
    """An exception as one line: its first non-empty line, or its type."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()[:300]
    return type(exc).__name__


def wait_for(what: str, probe: Callable[[], object], deadline_s: float, *,
             transient: Callable[[BaseException], bool] = lambda exc: isinstance(exc, OSError),
             backoff: StartupBackoff | None = None, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> None:
    """Call `probe` until it returns; a failure `transient` accepts is logged as one line and retried
    with backoff until `deadline_s` (0: for ever), then `StartupTimeout`. Any other failure is raised."""
    backoff = backoff or StartupBackoff()
    start = clock()
    failures = 0
    while True:
        try:
            probe()
        except Exception as exc:
            if not transient(exc):
                raise
            failures += 1
            delay, why = next_try(failures, clock() - start, deadline_s, backoff)
            reason = one_line(exc)
            if delay is None:
                raise StartupTimeout(f"{what} {why}: {reason}") from None
            log.warning("%s unreachable: %s; %s", what, reason, why,
                        extra={"dependency": what, "attempt": failures, "retry_in_s": round(delay, 3)})
            sleep(delay)
            continue
        if failures:
            log.info("%s reachable after %d failed tries", what, failures, extra={"dependency": what})
        return
