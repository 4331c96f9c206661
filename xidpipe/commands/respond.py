"""`xidpipe respond`: act on the stream's action requests (cordon, Jira, Slack) until stopped."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "respond",
        help="consume action requests: guarded cordon, Jira tickets, Slack messages",
        description="Consume the actions topic and act on each request from the incident's state in SQL: "
        "cordon through the guarded executor (XIDPIPE_ACTIONS_*; dry run without a cluster), tickets and "
        "chat through the sinks (XIDPIPE_SINKS_*; file outboxes without Jira or Slack). Settings of its "
        "own: XIDPIPE_RESPOND_BOOTSTRAP_SERVERS, _TOPIC_PREFIX, _DATABASE_URL, _GROUP_ID, _CLUSTER. Run one "
        "replica per cluster: the cordon circuit breaker counts within one process.",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.topics import topology
    from respond.cordon.runtime import api_client, build_executor
    from respond.cordon.settings import ActionSettings
    from respond.fleet_alerts import wire_breaker_trips
    from respond.responder import RespondSettings, build_responder, run_responder
    from respond.sinks.build import build_sinks
    from respond.sinks.settings import SinkSettings
    from streams.topics import ensure_topics

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = RespondSettings()
        actions = ActionSettings()
        api = api_client(actions)
        executor = build_executor(actions, api=api)
        sinks = build_sinks(SinkSettings())
    except (ValueError, OSError) as exc:  # pydantic's ValidationError and PolicyError are ValueErrors
        print(f"xidpipe respond: bad configuration: {exc}", file=sys.stderr)
        return 2
    responder = build_responder(settings, executor, sinks, cluster_api=api)
    wire_breaker_trips(responder)  # a breaker trip raises a fleet incident with its ticket and message

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # The worker normally created them; a responder started first must not wait on a missing topic.
        await ensure_topics(settings.bootstrap_servers, topology(settings.topic_prefix, settings.partitions),
                            settings.replication_factor, security=settings)
        await run_responder(settings, responder, stop)

    asyncio.run(main())
    return 0
