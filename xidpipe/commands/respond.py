"""`xidpipe respond`: act on the stream's action requests (cordon, Jira, Slack) until stopped."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "respond",
        help="consume action requests: guarded cordon, Jira tickets, Slack messages",
        description="Consume the actions topic and act on each request from the incident's state in SQL: "
        "cordon through the guarded executor (XIDPIPE_ACTIONS_*, XIDPIPE_KUBE_CONFIG; dry run without a "
        "cluster), tickets and chat through the sinks (XIDPIPE_SINKS_*; file outboxes without Jira or Slack). "
        "Shared settings: XIDPIPE_DATABASE_URL, XIDPIPE_BOOTSTRAP_SERVERS, XIDPIPE_TOPIC_PREFIX, XIDPIPE_CLUSTER; "
        "its own: XIDPIPE_RESPOND_GROUP_ID, its Kafka principal XIDPIPE_RESPOND_SASL_*. Waits for the database, "
        "Kafka and the API server up to XIDPIPE_STARTUP_DEADLINE_S. Several "
        "replicas elect one acting leader through a Lease with XIDPIPE_RESPOND_ELECTION=true (_LEASE_NAME, "
        "_LEASE_NAMESPACE, _IDENTITY, _LEASE_DURATION_S, _RENEW_DEADLINE_S, _RETRY_PERIOD_S).",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from models.topics import topology
    from respond.cordon.runtime import api_client, build_executor
    from respond.fleet_alerts import wire_breaker_trips
    from respond.leader import LeadershipLost, run_elected
    from respond.responder import build_responder, run_responder
    from respond.settings import RespondSettings
    from respond.sinks.build import build_sinks
    from streams.topics import ensure_topics
    from xidpipe.commands.exits import EXIT_UNAVAILABLE, UsageError
    from xidpipe.commands.startup import (
        config_error,
        load,
        start_logging,
        wait_for_database,
        wait_for_kafka,
        wait_for_kube,
    )

    settings = load(RespondSettings)  # with its sections: settings.actions, settings.sinks
    start_logging(settings)
    try:
        api = api_client(settings.actions)
    except Exception as exc:  # a kubeconfig that cannot be loaded: kubernetes' ConfigException, OSError
        if type(exc).__name__ != "ConfigException" and not isinstance(exc, ValueError | OSError):
            raise
        raise UsageError("cannot load the cluster configuration (XIDPIPE_KUBE_CONFIG="
                         f"{settings.actions.kube_config}): "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    deadline = settings.startup_deadline_s
    wait_for_database(settings.database, deadline)
    wait_for_kafka(settings.bootstrap_servers, deadline)
    wait_for_kube(api, deadline)
    try:
        elector = _elector(settings, api)  # its Lease check fences every cluster write of the executor
        executor = build_executor(settings.actions, api=api, database_url=settings.database, fence=elector)
        sinks = build_sinks(settings.sinks, settings.database)
    except (ValueError, OSError) as exc:  # PolicyError is a ValueError
        raise UsageError(config_error(exc)) from None
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
        if elector is None:
            await run_responder(settings, responder, stop)
            return
        try:
            await run_elected(elector, lambda lost: run_responder(settings, responder, lost), stop)
        except LeadershipLost as exc:  # work still running after the fence: nothing of it may act on
            logging.getLogger("xidpipe.respond").critical("%s: exiting", exc)
            os._exit(EXIT_UNAVAILABLE)  # the Lease, a dependency, is lost

    asyncio.run(main())
    return 0


def _elector(settings: Any, api: Any) -> Any:
    """The Lease election when `XIDPIPE_RESPOND_ELECTION` is on (it needs the cluster), else None."""
    if not settings.election:
        return None
    if api is None:
        raise ValueError("XIDPIPE_RESPOND_ELECTION needs a cluster for its Lease (XIDPIPE_KUBE_CONFIG)")
    from respond.leader import LeaderElector
    from respond.lease_kube import KubeLease

    return LeaderElector(KubeLease(api, settings.lease_name, settings.lease_namespace), settings.identity,
                         settings.lease_timings())
