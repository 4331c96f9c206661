"""Waiting in tests: poll a condition until it holds or a deadline passes, never a bare sleep.

`poll` (and `poll_async` for a test that runs an event loop) calls `check()` until it returns
something truthy and returns that. It fails with an AssertionError naming what it waited for and
the last value when the deadline passes, and at once when the process it watches died (with the
end of that process's log), so a crashed worker fails its test in seconds, not at the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Watched(Protocol):
    """A process a test waits on (`streams.runner.WorkerProcess`, the agent's, ...)."""

    def alive(self) -> bool: ...

    def log_tail(self) -> str: ...


def poll(what: str, check: Callable[[], T], timeout: float, watch: Watched | None = None, *,
         interval: float = 0.1, context: Callable[[], str] | None = None) -> T:
    """`check()` every `interval` seconds until it is truthy (returned); fails after `timeout` seconds
    or when `watch` died. The failure shows `context()` (default: the watched process's log tail)."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        _check_progress(what, last, timeout, deadline, watch, context)
        time.sleep(interval)


async def poll_async(what: str, check: Callable[[], T], timeout: float, watch: Watched | None = None, *,
                     interval: float = 0.1, context: Callable[[], str] | None = None) -> T:
    """`poll` for a coroutine: waits with `asyncio.sleep`, so the loop's other tasks run meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        _check_progress(what, last, timeout, deadline, watch, context)
        await asyncio.sleep(interval)


def _check_progress(what: str, last: object, timeout: float, deadline: float, watch: Watched | None,
                    context: Callable[[], str] | None) -> None:
    if watch is not None and not watch.alive():
        raise AssertionError(f"the process died while waiting for {what}:\n{watch.log_tail()}")
    if time.monotonic() >= deadline:
        detail = context() if context is not None else watch.log_tail() if watch is not None else ""
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})"
                             + (f"\n{detail}" if detail else ""))
