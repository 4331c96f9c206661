"""The tests' one polling helper (`tests.polling`)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.polling import poll, poll_async


class Process:
    def __init__(self, alive: bool) -> None:
        self._alive = alive

    def alive(self) -> bool:
        return self._alive

    def log_tail(self) -> str:
        return "Traceback: boom"


def test_poll_returns_the_first_truthy_value() -> None:
    counter = itertools.count()
    assert poll("the third call", lambda: (n := next(counter)) >= 2 and n, 5, interval=0.001) == 2


def test_poll_fails_at_the_deadline_naming_what_it_waited_for_and_the_last_value() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"waiting for the sky \(last: \[\]\)\nctx"):
        poll("the sky", lambda: [], 0.2, interval=0.01, context=lambda: "ctx")
    assert 0.2 <= time.monotonic() - started < 2


def test_poll_fails_at_once_when_the_watched_process_died() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match="died while waiting for the batch:\nTraceback: boom"):
        poll("the batch", lambda: False, 30, Process(alive=False))
    assert time.monotonic() - started < 1
    assert poll("the batch", lambda: "done", 30, Process(alive=True)) == "done"


def test_poll_async_lets_the_loop_run_while_it_waits() -> None:
    async def main() -> str:
        box: list[str] = []
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, box.append, "set by the loop")
        return await poll_async("the loop's callback", lambda: box and box[0], 5, interval=0.01)

    assert asyncio.run(main()) == "set by the loop"
