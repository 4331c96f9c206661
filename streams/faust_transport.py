"""Faust's aiokafka transport with one change: the worker's consumer fetches with a wait we choose.

Why: aiokafka sends one fetch per broker for the partitions that have nothing buffered. While the
agent works through a batch from busy partitions, that fetch holds only idle ones, and the broker
keeps it for the full wait: the busy partitions are not fetched again until it returns. Faust
(0.15.3) creates its worker's consumer with `fetch_max_wait_ms=1500` written into
`AIOKafkaConsumerThread._create_worker_consumer`, and has no setting for it; a short wait
(`WorkerSettings.fetch_max_wait_ms`, 100 ms) bounds that stall.

How: this module is the one place that leans on what Faust and aiokafka do not document. The
transport is given to the one app that wants it (`app.transport`, a public attribute of the app),
so no other Faust app of the process is touched. Its consumer thread builds the consumer as Faust
does and sets the wait on it before it starts, where aiokafka's consumer reads it to create its
fetcher. `tests/streams/test_faust_transport.py` starts such a consumer and fails when a Faust or
aiokafka upgrade changes either step; drop this module once Faust has a setting for the wait.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = transport.fetch_max_wait_ms  # read by AIOKafkaConsumer.start
        return consumer


class _Consumer(driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class FetchWaitTransport(driver.Transport):
    """Faust's aiokafka transport whose worker consumer waits at most `fetch_max_wait_ms` per fetch."""

    Consumer = _Consumer

    def __init__(self, app: faust.App, fetch_max_wait_ms: int) -> None:
        super().__init__(app.conf.broker_consumer, app)
        self.fetch_max_wait_ms = fetch_max_wait_ms


def use_fetch_wait(app: faust.App, fetch_max_wait_ms: int) -> None:
    """Have `app` consume through a `FetchWaitTransport`; call it before the app's topics are made."""
    app.transport = FetchWaitTransport(app, fetch_max_wait_ms)
