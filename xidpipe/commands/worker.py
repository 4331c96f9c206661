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
        "first. Every option can also be set as XIDPIPE_<NAME> in the environment (policy values as "
        "XIDPIPE_POLICY__<NAME>). SIGTERM stops it cleanly.",
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
    p.add_argument("--log-level", help="crit, error, warn, info or debug (default info)")
    p.set_defaults(func=run)


_OPTIONS = ("bootstrap_servers", "database_url", "app_id", "topic_prefix", "partitions", "cluster", "datadir",
            "log_level", "metrics_host", "metrics_port")


def run(args: argparse.Namespace) -> int:
    from streams.settings import WorkerSettings
    from streams.worker import run_worker

    overrides = {k: getattr(args, k) for k in _OPTIONS if getattr(args, k, None) is not None}
    return run_worker(WorkerSettings(**overrides))
