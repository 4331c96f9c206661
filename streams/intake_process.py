"""The intake (`streams.intake.Intake`, with its store) for the event loop: in a process of its own (the
worker's `store_process`) or on one thread, one call at a time."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from models.stream_policy import PipelinePolicy
from streams.intake import Intake, IntakeResult, Message
from streams.items import ParserBounds
from streams.outbox import Outgoing
from streams.store import Store, StoreRetry

log = logging.getLogger(__name__)


class IntakeProcess:
    """The intake and its store for the event loop, which only awaits.

    By default they run in a process of their own, started with the worker: decoding, parsing and
    the database work then run on another core than the stream, which CPython's one-thread-at-a-time
    interpreter would otherwise share between them. With `process=False` they run on one thread of
    the calling process. Either way one call runs at a time, in the order made. A store process
    that dies is replaced; the call it was running raises `StoreRetry` (`unavailable`) and can be
    retried (its transaction was rolled back).
    """

    def __init__(self, url: str, policy: PipelinePolicy | None = None, cluster: str = "default", *,
                 kinds: dict[str, frozenset[str]] | None = None, process: bool = True,
                 log_level: int = logging.INFO, log_format: str = "auto", bounds: ParserBounds | None = None) -> None:
        self._args = (url, (policy or PipelinePolicy()).model_dump(mode="json"), cluster, dict(kinds or {}),
                      log_level, log_format, bounds)
        self._process = process
        self.intake: Intake | None = None if process else Intake(Store(url, policy, cluster), dict(kinds or {}),
                                                                 bounds)
        self._executor: Executor = self._new_executor()

    def _new_executor(self) -> Executor:
        if not self._process:
            return ThreadPoolExecutor(max_workers=1, thread_name_prefix="xidpipe-db")
        # The worker's pid goes along: the child checks it is still its parent (the worker may be pid 1).
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_start_store_process, initargs=(*self._args, os.getpid()))

    async def _run(self, method: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        if self.intake is not None:
            return await loop.run_in_executor(self._executor, getattr(self.intake, method), *args)
        executor = self._executor
        try:
            return await loop.run_in_executor(executor, _call_intake, method, args)
        except BrokenProcessPool as exc:
            if executor is self._executor:
                log.error("the store process died; starting another")
                executor.shutdown(wait=False)
                self._executor = self._new_executor()
            raise StoreRetry("unavailable", "the store process died") from exc

    async def start(self) -> None:
        """Start the store process now rather than at the first call."""
        await self._run("ping")

    async def handle(self, batch_id: int, messages: Sequence[Message], sent: Sequence[int] = (),
                     per_message: bool = False) -> IntakeResult:
        result: IntakeResult = await self._run("handle", batch_id, list(messages), list(sent), per_message)
        return result

    async def flush_idle(self, idle_s: float) -> IntakeResult:
        result: IntakeResult = await self._run("flush_idle", idle_s)
        return result

    async def forget(self, partitions: Sequence[tuple[str, int]]) -> int:
        n: int = await self._run("forget", list(partitions))
        return n

    async def create_schema(self) -> None:
        await self._run("create_schema")

    async def sweep(self) -> list[Outgoing]:
        out: list[Outgoing] = await self._run("sweep")
        return out

    async def unsent(self, older_than_s: float) -> list[Outgoing]:
        out: list[Outgoing] = await self._run("unsent", older_than_s)
        return out

    async def mark_sent(self, ids: Sequence[int]) -> None:
        await self._run("mark_sent", list(ids))

    async def prune_sent(self, keep_s: float) -> int:
        n: int = await self._run("prune_sent", keep_s)
        return n

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        if self.intake is not None:
            self.intake.dispose()


_PROCESS_INTAKE: Intake | None = None  # in the store process: the one Intake


def _start_store_process(url: str, policy: dict[str, Any], cluster: str, kinds: dict[str, frozenset[str]],
                         log_level: int, log_format: str, bounds: ParserBounds | None, worker_pid: int) -> None:
    """In the store process: die with the worker, leave signals to it, log like it, open the store."""
    import signal
    import sys

    global _PROCESS_INTAKE
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker stops on them, then ends this process
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
        # The worker was gone before the line above: this process was reparented. Not `getppid() == 1`,
        # since a worker that is its container's first process is pid 1 itself.
        if os.getppid() != worker_pid:
            os._exit(1)
    from service.logs import configure_logging

    configure_logging(log_level, log_format)
    _PROCESS_INTAKE = Intake(Store(url, PipelinePolicy.model_validate(policy), cluster), kinds, bounds)


def _call_intake(method: str, args: tuple[Any, ...]) -> Any:
    assert _PROCESS_INTAKE is not None
    return getattr(_PROCESS_INTAKE, method)(*args)
