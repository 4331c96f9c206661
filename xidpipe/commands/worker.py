"""`xidpipe worker`: the Faust stream worker (node records → incidents, fault events, actions)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "worker",
        help="run the stream worker",
        description="Consume the node agents' topics, attribute, classify and group faults into incidents, "
        "persist them, and publish incident updates and action requests. Creates missing topics and tables "
        "first; waits for Kafka and the database up to XIDPIPE_STARTUP_DEADLINE_S. Every setting can also be "
        "given in the environment or the config file (docs/configuration.md: XIDPIPE_DATABASE_URL, "
        "XIDPIPE_BOOTSTRAP_SERVERS, XIDPIPE_WORKER_<NAME>, policy values as XIDPIPE_WORKER_POLICY__<NAME>). "
        "SIGTERM stops it cleanly.",
    )
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (default 127.0.0.1:9092)")
    p.add_argument("--database-url", help="SQLAlchemy URL (default sqlite:///var/xidpipe.db)")
    p.add_argument("--app-id", help="Faust app id and consumer group (default xidpipe-worker)")
    p.add_argument("--topic-prefix", help="prefix of every topic name (default none)")
    p.add_argument("--partitions", type=int, help="partitions of the topics it creates (default 8)")
    p.add_argument("--cluster", help="cluster name, the key of fleet incidents (default 'default')")
    p.add_argument("--datadir", type=Path, help="Faust data directory (default var/faust)")
    p.add_argument("--metrics-host", help="address of /metrics, /healthz and /readyz (default 127.0.0.1)")
    p.add_argument("--metrics-port", type=int, help="their port (default 9465)")
    p.add_argument("--log-level", help="debug, info, warning, error or critical (default info)")
    p.set_defaults(func=run)


_OPTIONS = ("bootstrap_servers", "database_url", "app_id", "topic_prefix", "partitions", "cluster", "datadir",
            "log_level", "metrics_host", "metrics_port")


def run(args: argparse.Namespace) -> int:
    from streams.settings import WorkerSettings
    from streams.worker import run_worker
    from xidpipe.commands.startup import load, start_logging, wait_for_database, wait_for_kafka

    settings = load(WorkerSettings, **{k: getattr(args, k) for k in _OPTIONS if getattr(args, k, None) is not None})
    start_logging(settings)
    wait_for_database(settings.database_url, settings.startup_deadline_s)
    wait_for_kafka(settings.bootstrap_servers, settings.startup_deadline_s)
    return run_worker(settings)
