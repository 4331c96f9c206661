"""One responder replica for tests/respond/test_failover.py: `python -m tests.respond.failover_child CONFIG`.

It is composed as `xidpipe respond` composes it (the Lease election, whose check fences the executor's
cluster writes, executor, sinks, responder, breaker trips), from the JSON file CONFIG instead of the
environment, so the test names every setting.
SIGTERM and SIGINT stop it cleanly (the Lease is released); SIGKILL is the crash under test.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from kubernetes import client
from pydantic import SecretStr

from respond.cordon.runtime import build_executor
from respond.cordon.settings import ActionSettings
from respond.fleet_alerts import wire_breaker_trips
from respond.leader import LeaderElector, run_elected
from respond.lease_kube import KubeLease
from respond.responder import build_responder, run_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings


def main(cfg: dict[str, Any]) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {cfg['identity']} %(levelname)s %(name)s: %(message)s")
    db = cfg["database_url"]
    timings = cfg["timings"]
    margin = timings["lease_duration_s"] - timings["renew_deadline_s"]
    actions = ActionSettings(policy_file=Path(cfg["policy"]), reporting_instance=cfg["identity"],
                             api_write_timeout_s=margin)
    settings = RespondSettings(bootstrap_servers=cfg["bootstrap"], topic_prefix=cfg["prefix"], database_url=db,
                               group_id=cfg["group"], cluster="test-cluster", election=True,
                               lease_name=cfg["lease"], lease_namespace="default", identity=cfg["identity"],
                               actions=actions, shutdown_grace_s=margin / 2, **timings)
    kube = client.Configuration(host=cfg["server"], api_key={"BearerToken": cfg["token"]},
                                api_key_prefix={"BearerToken": "Bearer"}, ssl_ca_cert=cfg["ca"])
    api = client.ApiClient(kube)
    elector = LeaderElector(KubeLease(api, cfg["lease"], "default"), cfg["identity"], settings.lease_timings())
    executor = build_executor(settings.actions, api=api, database_url=db, fence=elector)
    sinks = build_sinks(SinkSettings(jira_url=cfg["jira_url"], jira_user=cfg["jira_user"],
                                     jira_api_token=SecretStr(cfg["jira_token"]), jira_flavor="server",
                                     slack_bot_token=SecretStr(cfg["slack_token"]),
                                     slack_base_url=cfg["slack_url"], group_wait_s=0, slack_channel_interval_s=0), db)
    responder = build_responder(settings, executor, sinks, cluster_api=api)
    wire_breaker_trips(responder)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_elected(elector, lambda lost: run_responder(settings, responder, lost), stop)

    asyncio.run(run())


if __name__ == "__main__":
    main(json.loads(Path(sys.argv[1]).read_text()))
