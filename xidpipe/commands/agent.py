"""`xidpipe agent`: the node agent (kernel log, NVML, PodResources, evidence → Kafka)."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from typing import Any

from xidpipe.commands.exits import UsageError
from xidpipe.commands.options import node_name

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "agent",
        help="run the GPU node agent",
        description="Read the kernel log from a persisted cursor, keep GPU-relevant lines, watch NVML and "
        "the kubelet PodResources API, capture evidence at fault time, and publish it all to Kafka keyed "
        "by node. Every option can also be set as XIDPIPE_AGENT_<NAME> in the environment or agent_<name> in "
        "the config file (the Kafka bootstrap servers and the log level are the shared XIDPIPE_BOOTSTRAP_SERVERS "
        "and XIDPIPE_LOG_LEVEL).",
    )
    src = p.add_argument_group("kernel log")
    src.add_argument("--source", choices=["kmsg", "journald", "file"], help="kernel-log source (default kmsg)")
    src.add_argument("--kmsg-path", type=Path, help="kmsg device or a recorded stream (default /dev/kmsg)")
    src.add_argument("--boot-id-path", type=Path, help="default /proc/sys/kernel/random/boot_id")
    src.add_argument("--journal-file", type=Path, help="read this journal file (journald source)")
    src.add_argument("--journal-directory", type=Path, help="read journals from this directory")
    src.add_argument("--journalctl", help="journalctl binary")
    src.add_argument("--log-file", type=Path, help="kernel log file (file source, default /var/log/kern.log)")
    src.add_argument("--replay-rate", type=float, metavar="LINES_PER_S", help="pace a file source")
    src.add_argument("--no-follow", action="store_true", help="stop at the end of the source once published")
    src.add_argument("--boot-time", metavar="ISO_TIME",
                     help="file source: the recorded node's boot time, for lines stamped only with an uptime")
    kafka = p.add_argument_group("Kafka and state")
    kafka.add_argument("--node", type=node_name, help="node name (default $NODE_NAME or the host name)")
    kafka.add_argument("--bootstrap-servers", help="Kafka bootstrap servers, comma-separated")
    kafka.add_argument("--state-dir", type=Path, help="cursors and spool (default /var/lib/xidpipe-agent)")
    kafka.add_argument("--spool-max-mb", type=int, help="spool size above which non-fault lines drop (256)")
    side = p.add_argument_group("NVML, PodResources, evidence, metrics")
    side.add_argument("--nvml", dest="nvml_enabled", action="store_true", default=None, help="watch NVML (default)")
    side.add_argument("--no-nvml", dest="nvml_enabled", action="store_false", help="do not load NVML")
    side.add_argument("--podresources-socket", type=Path, help="kubelet PodResources socket")
    side.add_argument("--no-podresources", dest="podresources_enabled", action="store_false", default=None,
                      help="do not poll the kubelet PodResources API")
    side.add_argument("--no-evidence", dest="evidence_enabled", action="store_false", default=None,
                      help="do not capture evidence at fault time (off with --replay-rate)")
    side.add_argument("--proc-root", type=Path, help="host /proc (default /proc)")
    side.add_argument("--metrics-port", type=int, help="/healthz and /metrics port (0: any free port)")
    side.add_argument("--no-metrics", action="store_true", help="do not serve /healthz and /metrics")
    side.add_argument("--log-level", help="INFO, DEBUG, ...")
    p.set_defaults(func=run)


_SIMPLE = (
    "source", "kmsg_path", "boot_id_path", "journal_file", "journal_directory", "journalctl", "log_file",
    "replay_rate", "node", "bootstrap_servers", "state_dir", "nvml_enabled", "podresources_socket",
    "podresources_enabled", "evidence_enabled", "proc_root", "metrics_port", "log_level", "boot_time",
)


def settings_from_args(args: argparse.Namespace) -> Any:
    from agents.settings import AgentSettings
    from xidpipe.commands.startup import load

    overrides: dict[str, Any] = {k: getattr(args, k) for k in _SIMPLE if getattr(args, k, None) is not None}
    if args.no_follow:
        overrides["follow"] = False
    if args.replay_rate is not None and args.evidence_enabled is None:
        # A replayed log describes another machine: this host's nvidia-smi, lspci and /proc are not
        # its evidence.
        overrides["evidence_enabled"] = False
    if args.spool_max_mb is not None:
        overrides["spool_max_bytes"] = args.spool_max_mb * 1024 * 1024
    if args.no_metrics:
        overrides["metrics_port"] = None
    return load(AgentSettings, **overrides)


def run(args: argparse.Namespace) -> int:
    from agents.main import build_agent
    from models.node_names import node_name_problem
    from xidpipe.commands.startup import start_logging

    settings = settings_from_args(args)
    problem = node_name_problem(settings.node)  # from --node, $NODE_NAME or the host name
    if problem is not None:
        raise UsageError(f"{problem}; give the Kubernetes node name with --node or $NODE_NAME")
    start_logging(settings)
    agent = build_agent(settings)

    def _stop(signum: int, _frame: Any) -> None:
        log.info("stopping on signal", extra={"signal": signum})
        agent.stop_event.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return agent.run()
