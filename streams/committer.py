"""What the worker's committer keeps between the Faust agent and the store: the events waiting for a
transaction (`Batches`), which of them belong to the group's current generation (`current_events`)
and which stored events may be acknowledged (`Acks`).

Both hold Faust events but call nothing of Faust: the app (`streams.app`) acknowledges what `Acks`
returns, in that order, through the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from streams.items import Ref


def current_events(events: Sequence[Any], generation: int | None) -> tuple[Sequence[Any], int]:
    """The events fetched in the consumer group's `generation`, and how many were not. An event fetched
    before a rebalance is neither handled nor acknowledged: its partition was revoked, and whoever
    reads it now starts at its committed offset. An event that does not say its generation is current."""
    current = [e for e in events if getattr(e.message, "generation_id", None) in (None, generation)]
    return (events, 0) if len(current) == len(events) else (current, len(events) - len(current))


class Acks:
    """Which stored events may be acknowledged: per partition in offset order, none from a held one on.

    Faust commits acknowledged offsets up to the first gap, but not reliably so at the start of
    the list (just after its committed offset or a rebalance it commits past an unacknowledged
    message), so the order is kept here: an event stored behind a held one *waits*, unacknowledged,
    until every held event before it is released. Faust does not wait for waiting events at a
    rebalance or at shutdown (`stream_wait_empty` is off), so a held record's lines are simply left
    to the partition's next reader.
    """

    def __init__(self) -> None:
        self._held: set[Ref] = set()
        self._waiting: dict[tuple[str, int], deque[Any]] = {}  # per partition, in offset order
        self._touched: set[tuple[str, int]] = set()  # partitions with a released message since `drain`

    def __len__(self) -> int:
        return sum(len(q) for q in self._waiting.values())

    def note(self, held: Iterable[Ref], released: Iterable[Ref]) -> None:
        self._held.update(held)
        for ref in released:
            self._held.discard(ref)
            self._touched.add(ref[:2])

    def done(self, events: Iterable[Any]) -> list[Any]:
        """The stored `events` (in arrival order) and the waiting ones that may be acknowledged now."""
        ready: list[Any] = []
        for event in events:
            m = event.message
            queue = self._waiting.get((m.topic, m.partition))
            if queue is None:
                if (m.topic, m.partition, m.offset) not in self._held:
                    ready.append(event)
                    continue
                queue = self._waiting[(m.topic, m.partition)] = deque()
            queue.append(event)
        return ready + self.drain()

    def drain(self) -> list[Any]:
        """The waiting events that may be acknowledged now."""
        ready: list[Any] = []
        for tp in self._touched:
            queue = self._waiting.get(tp)
            while queue:
                m = queue[0].message
                if (m.topic, m.partition, m.offset) in self._held:
                    break
                ready.append(queue.popleft())
            if queue is not None and not queue:
                del self._waiting[tp]
        self._touched.clear()
        return ready

    def drop(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Forget the events of `partitions` (never acknowledged); returns how many."""
        gone = set(partitions)
        n = sum(len(self._waiting.pop(tp, ())) for tp in gone)
        self._held = {r for r in self._held if r[:2] not in gone}
        self._touched -= gone
        return n


class Batches:
    """Events waiting for the committer, in arrival order, with backpressure; and whether every event
    handed over was handled (`wait_settled`: none waiting, none in the committer's hands)."""

    def __init__(self, max_batch: int, max_pending: int) -> None:
        self.max_batch = max_batch
        self.max_pending = max(max_pending, max_batch)
        self._pending: deque[Any] = deque()
        self._in_hand = 0  # events the committer took and has not settled yet
        self._ready = asyncio.Event()
        self._full = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._settled = asyncio.Event()
        self._settled.set()

    def __len__(self) -> int:
        return len(self._pending)

    async def put(self, event: Any, committer: asyncio.Task[None]) -> None:
        while len(self._pending) >= self.max_pending:
            self._space.clear()
            space = asyncio.ensure_future(self._space.wait())
            try:
                await asyncio.wait([committer, space], return_when=asyncio.FIRST_COMPLETED)
            finally:
                space.cancel()
            if committer.done():
                committer.result()  # the committer failed: its error stops the agent
                raise RuntimeError("the committer stopped")
        self._pending.append(event)
        self._settled.clear()
        self._ready.set()
        if len(self._pending) >= self.max_batch:
            self._full.set()

    async def wait_ready(self) -> None:
        while not self._pending:
            self._ready.clear()
            await self._ready.wait()

    async def wait_full(self, timeout: float) -> None:
        """Until a full batch is waiting or `timeout` seconds passed."""
        self._full.clear()
        if len(self._pending) < self.max_batch:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._full.wait(), timeout)

    def take(self) -> list[Any]:
        """The next batch, in the committer's hands until `settle`."""
        n = min(len(self._pending), self.max_batch)
        out = [self._pending.popleft() for _ in range(n)]
        self._in_hand += n
        self._space.set()
        return out

    def settle(self, taken: int) -> None:
        """`taken` events the committer took are handled (stored and acknowledged, or left alone)."""
        self._in_hand = max(0, self._in_hand - taken)
        if not self._in_hand and not self._pending:
            self._settled.set()

    async def wait_settled(self) -> None:
        """Until every event put was taken and settled."""
        while self._in_hand or self._pending:
            self._settled.clear()
            await self._settled.wait()
