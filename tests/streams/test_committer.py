"""What the committer keeps between the Faust agent and the store (`streams.committer`): the batches
it takes, the events of the current generation, and the order in which stored events are acknowledged.

Events are stand-ins with what Faust's events carry for this: `message.topic`, `.partition`,
`.offset` and `.generation_id`."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from streams.committer import Acks, Batches, current_events

TOPIC = "t.xidpipe.node.kernel"


def event(partition: int, offset: int, generation: int | None = None) -> Any:
    return SimpleNamespace(message=SimpleNamespace(topic=TOPIC, partition=partition, offset=offset,
                                                   generation_id=generation))


def test_batches_take_what_arrived_up_to_the_most_and_wait_when_full() -> None:
    async def run() -> None:
        b = Batches(max_batch=3, max_pending=4)
        committer = asyncio.create_task(asyncio.sleep(3600))
        for i in range(4):
            await b.put(i, committer)
        blocked = asyncio.create_task(b.put(4, committer))
        await asyncio.sleep(0.01)
        assert not blocked.done()  # 4 pending: the stream waits
        assert b.take() == [0, 1, 2]  # a batch is at most max_batch
        await asyncio.wait_for(blocked, 1)
        assert b.take() == [3, 4]
        await asyncio.wait_for(b.wait_full(0.01), 1)  # nothing waiting: returns after the timeout
        committer.cancel()

    asyncio.run(run())


def test_batches_are_settled_once_every_event_put_was_taken_and_handled() -> None:
    async def run() -> None:
        b = Batches(max_batch=2, max_pending=10)
        committer = asyncio.create_task(asyncio.sleep(3600))
        await asyncio.wait_for(b.wait_settled(), 1)  # nothing handed over: settled
        for i in range(3):
            await b.put(i, committer)
        settled = asyncio.create_task(b.wait_settled())
        first = b.take()
        b.settle(len(first))
        await asyncio.sleep(0.01)
        assert not settled.done()  # one event still waits
        second = b.take()
        await asyncio.sleep(0.01)
        assert not settled.done()  # taken, not handled yet
        b.settle(len(second))
        await asyncio.wait_for(settled, 1)
        committer.cancel()

    asyncio.run(run())


def test_events_fetched_before_a_rebalance_are_neither_handled_nor_acknowledged() -> None:
    now, before, unknown = event(0, 1, 3), event(0, 2, 2), event(0, 3, None)
    assert current_events([before, now, unknown], 3) == ([now, unknown], 1)
    batch = [now, unknown]
    assert current_events(batch, 3) == (batch, 0)


def test_acknowledgements_keep_offset_order_and_stop_at_a_held_message() -> None:
    acks = Acks()
    p0 = [event(0, o) for o in range(4)]
    p1 = [event(1, 0)]
    acks.note(held=[(TOPIC, 0, 1)], released=[])
    assert acks.done([p0[0], p0[1], p1[0], p0[2]]) == [p0[0], p1[0]]
    assert acks.done([p0[3]]) == [] and len(acks) == 3  # behind the held one: they wait
    acks.note(held=[], released=[(TOPIC, 0, 1)])
    assert acks.drain() == p0[1:] and len(acks) == 0


def test_dropped_partitions_are_never_acknowledged() -> None:
    acks = Acks()
    held, later = event(0, 5), event(0, 6)
    acks.note(held=[(TOPIC, 0, 5)], released=[])
    assert acks.done([held, later]) == []
    assert acks.drop([(TOPIC, 0)]) == 2
    acks.note(held=[], released=[(TOPIC, 0, 5)])  # a stale release after the revocation
    assert acks.drain() == [] and len(acks) == 0
