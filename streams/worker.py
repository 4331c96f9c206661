"""Run the stream worker: create the topics and tables if missing, then the Faust worker.

`python -m streams.worker` reads `WorkerSettings` from the environment (`XIDPIPE_*`); `xidpipe worker`
does the same with command-line overrides. SIGTERM or SIGINT stops it cleanly: the batch in hand
is committed, offsets are committed, the consumer leaves its group.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys

from models.topics import topology
from service.logs import configure_logging, level_name, logging_config
from streams.settings import WorkerSettings
from streams.store import Store
from streams.topics import ensure_topics

log = logging.getLogger(__name__)


def prepare(settings: WorkerSettings) -> None:
    """Create missing topics (with their dead-letter twins) and tables."""
    loop = asyncio.new_event_loop()
    try:
        created = loop.run_until_complete(
            ensure_topics(settings.bootstrap_servers, topology(settings.topic_prefix, settings.partitions),
                          settings.replication_factor, security=settings)
        )
    finally:
        loop.close()
    if created:
        log.info("created topics: %s", ", ".join(created))
    store = Store(settings.database_url, settings.policy, settings.cluster)
    try:
        store.create_schema()
    finally:
        store.dispose()


def run_worker(settings: WorkerSettings) -> int:
    """Run until stopped; returns the exit status."""
    import faust

    from streams.app import create_app

    configure_logging(settings.log_level, settings.log_format)
    prepare(settings)
    sys.setswitchinterval(0.001)  # three busy threads (event loop, consumer, database): hand the GIL over sooner
    # The code and settings loaded so far stay for the worker's life: keep them out of the collector's
    # full passes, and collect the short-lived objects of a busy stream less often.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    asyncio.set_event_loop(asyncio.new_event_loop())
    app = create_app(settings)
    # Faust (mode) configures logging itself when the worker starts: it is given ours.
    worker = faust.Worker(app, loglevel=level_name(settings.log_level), quiet=True, redirect_stdouts=False,
                          logging_config=logging_config(settings.log_level, settings.log_format))
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int | None) else 1
    return 0


def main() -> int:
    return run_worker(WorkerSettings())


if __name__ == "__main__":
    sys.exit(main())
