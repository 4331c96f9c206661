"""`python -m tests.service.responder_process CONFIG_JSON`: the responder as its own process, built
from settings objects (as `xidpipe respond` builds it), with the demo's defaults: a dry-run cordon
without a cluster, ticket and chat outboxes. SIGTERM stops it cleanly."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path


def main(config: dict[str, str | int]) -> None:
    from respond.cordon.runtime import build_executor
    from respond.responder import build_responder, run_responder
    from respond.settings import RespondSettings
    from respond.sinks.build import build_sinks
    from respond.sinks.settings import SinkSettings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    db = str(config["database_url"])
    settings = RespondSettings(bootstrap_servers=str(config["bootstrap_servers"]), database_url=db,
                               topic_prefix=str(config["topic_prefix"]), group_id=str(config["group_id"]),
                               metrics_port=int(config["metrics_port"]))
    executor = build_executor(settings.actions, database_url=db)
    sinks = build_sinks(SinkSettings(outbox_dir=Path(str(config["outbox"])), group_wait_s=0,
                                     chat_flush_interval_s=0.5), db)
    responder = build_responder(settings, executor, sinks)

    async def run() -> None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        await run_responder(settings, responder, stop)

    asyncio.run(run())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
