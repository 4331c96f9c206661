"""The one adapter around Faust (`streams.faust_transport`): the worker's consumer fetches with
`fetch_max_wait_ms`, and no other Faust app of the process changes.

It leans on what Faust (0.15.3) and aiokafka (0.14) do not document: Faust's consumer thread builds
the worker's aiokafka consumer in `_create_worker_consumer`, and aiokafka's consumer creates its
fetcher, at start, from the wait it was built with. These tests start such a consumer against the
broker and read the wait its fetcher uses: they fail when an upgrade of either library changes that.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import faust
import pytest

from streams.app import create_app
from streams.faust_transport import FetchWaitTransport
from streams.settings import WorkerSettings

pytestmark = pytest.mark.kafka

FAUST_FIXED_WAIT_MS = 1500  # what Faust 0.15.3 gives every worker consumer


async def fetch_wait_ms(app: faust.App) -> int:
    """The fetch wait of the aiokafka consumer that `app`'s worker consumes with, once started."""
    thread: Any = app.consumer._thread  # the consumer thread Faust starts; it makes the consumer as below
    consumer = thread._create_consumer(loop=asyncio.get_running_loop())
    await consumer.start()
    try:
        wait: int = consumer._fetcher._fetch_max_wait_ms
        return wait
    finally:
        await consumer.stop()


def test_the_worker_consumer_fetches_with_the_configured_wait_and_no_other_app_changes(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    async def run() -> tuple[int, int]:
        ours = create_app(WorkerSettings(bootstrap_servers=kafka_bootstrap, app_id="t-fetch-wait",
                                         datadir=tmp_path / "faust", fetch_max_wait_ms=123))
        assert isinstance(ours.transport, FetchWaitTransport)
        other = faust.App("t-fetch-wait-other", broker=f"kafka://{kafka_bootstrap}", autodiscover=False,
                          datadir=str(tmp_path / "other"))
        return await fetch_wait_ms(ours), await fetch_wait_ms(other)

    ours, other = asyncio.run(run())
    assert ours == 123
    assert other == FAUST_FIXED_WAIT_MS, "Faust's own wait changed: see whether it has a setting now"
