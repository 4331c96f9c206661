"""The node agent's settings: one object, loaded once at start (`service.config`: its own settings as
`XIDPIPE_AGENT_<NAME>` or `agent_<name>` in the config file, the shared ones as `XIDPIPE_<NAME>`).

The agent is a Kafka principal of its own: its credentials are `XIDPIPE_AGENT_SASL_USERNAME`, ...
"""

from __future__ import annotations

import socket
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from agents.kernlog.prefilter import DEFAULT_FAULT_PATTERNS, DEFAULT_KEEP_PATTERNS
from models.kafka_security import KafkaClientSecurity
from service.config import ServiceSettings, shared

MiB = 1024 * 1024


class AgentSettings(KafkaClientSecurity, ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_AGENT_")
    service = "agent"

    node: str = Field(
        default_factory=socket.gethostname,
        validation_alias=AliasChoices("XIDPIPE_AGENT_NODE", "NODE_NAME", "node"),
        description="node name, the Kafka key of every record; the DaemonSet sets NODE_NAME from spec.nodeName",
        pattern=r"^[^/]+$",  # a state record's key is <node>/<kind>: the node part ends at the first '/'
    )

    # --- kernel log -------------------------------------------------------------------------
    source: Literal["kmsg", "journald", "file"] = "kmsg"
    kmsg_path: Path = Path("/dev/kmsg")
    boot_id_path: Path = Path("/proc/sys/kernel/random/boot_id")
    journalctl: str = Field(default="journalctl", description="journalctl binary (systemd 242+)")
    journal_file: Path | None = Field(default=None, description="read this journal file instead of the system journal")
    journal_directory: Path | None = Field(default=None, description="read journals from this directory")
    log_file: Path = Path("/var/log/kern.log")
    replay_rate: float | None = Field(
        default=None, gt=0, description="lines per second when replaying a file (demos, benchmarks)"
    )
    follow: bool = Field(default=True, description="keep reading when the end is reached (False: stop at the end)")
    boot_time: datetime | None = Field(
        default=None,
        description="file source: the boot time of the node that wrote the log, so that lines stamped only "
        "with an uptime (raw dmesg `[ 1234.567890]`) get their wall-clock time when replaying a recording",
    )
    keep_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_KEEP_PATTERNS))
    fault_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_FAULT_PATTERNS))

    # --- state and spool --------------------------------------------------------------------
    state_dir: Path = Field(default=Path("/var/lib/xidpipe-agent"), description="cursors and the spool")
    spool_max_bytes: int = Field(
        default=256 * MiB, ge=MiB, description="spool size above which non-fault records are dropped"
    )
    spool_fault_reserve_bytes: int = Field(
        default=16 * MiB, ge=0, description="room beyond spool_max_bytes kept for fault records"
    )

    # --- Kafka ------------------------------------------------------------------------------
    bootstrap_servers: str = shared("bootstrap_servers", "127.0.0.1:9092",
                                    description="Kafka bootstrap servers, comma-separated")
    # security_protocol, sasl_*, ssl_*: `models.kafka_security.KafkaClientSecurity`.
    linger_ms: int = Field(default=2, ge=0, description="producer batching delay; latency budget is 50 ms")
    identity_token_file: Path | None = Field(
        default=None,
        description="the projected ServiceAccount token (audience xidpipe) sent with every record so the "
        "worker can check the record speaks for this node; None: records carry no identity",
    )

    # --- NVML -------------------------------------------------------------------------------
    nvml_enabled: bool = True
    nvml_call_timeout_s: float = Field(default=5.0, gt=0, description="a hung NVML call is abandoned after this")
    nvml_event_wait_ms: int = Field(default=1000, ge=10, description="nvmlEventSetWait_v2 timeout per poll")
    inventory_interval_s: float = Field(default=300.0, gt=0, description="inventory republished at least this often")
    inventory_check_s: float = Field(default=30.0, gt=0, description="inventory re-read to detect changes")
    processes_interval_s: float = Field(default=10.0, gt=0)
    proc_root: Path = Field(default=Path("/proc"), description="host /proc (pid cgroups and command lines)")
    sysfs_root: Path = Path("/sys")

    # --- GPU health (agents/signals/health, docs/signals.md) --------------------------------
    health_enabled: bool = Field(default=True, description="poll each GPU's health through NVML (with NVML on)")
    health_interval_s: float = Field(
        default=10.0, gt=0, description="each GPU's health is read this often (DCGM's health watches sample every "
        "10 s); a condition reaches its incident within this plus a second")
    health_heartbeat_s: float = Field(
        default=600.0, gt=0, description="a GPU's (and the node's) health record is published at least this often "
        "when nothing changed; changes and minutes with activity are published at once")
    expected_gpus: int | None = Field(
        default=None, ge=0, description="the GPUs this node should have; None: the most the agent has seen here "
        "(kept in state_dir/gpu-health.json, so a reboot that loses every GPU is still seen)")
    modules_root: Path = Field(
        default=Path("/lib/modules"), description="the host's /lib/modules (read-only): the kernels an nvidia "
        "module is installed for, when the driver is not loaded")

    # --- kubelet PodResources ---------------------------------------------------------------
    podresources_enabled: bool = True
    podresources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    podresources_interval_s: float = Field(default=10.0, gt=0)
    podresources_timeout_s: float = Field(default=10.0, gt=0)
    gpu_resource_prefixes: list[str] = Field(default_factory=lambda: ["nvidia.com/gpu", "nvidia.com/mig-"])

    # --- workloads: the GPU pods' owners, from the API server -----------------------------------
    workloads_enabled: bool = Field(
        default=False,
        description="watch the node's pods on the API server and publish each GPU pod's workload (its owner "
        "chain and well-known labels); off by default because it needs an API token and RBAC, which the chart "
        "gives the agent when agent.workloads.enabled (its default there)",
    )
    workloads_kube_config: str = Field(
        default="in-cluster", description="'in-cluster' (the pod's ServiceAccount token) or a kubeconfig's path",
    )
    workloads_heartbeat_s: float = Field(
        default=600.0, gt=0,
        description="the snapshot is sent again at least this often: a state record a full spool dropped, or a "
        "worker that lost it, has it back within 10 minutes, for one small record per node",
    )
    workloads_watch_timeout_s: int = Field(
        default=300, ge=10,
        description="how long one watch request lasts before the server ends it and it is resumed from its "
        "resourceVersion (the API server's own default is 5 to 10 minutes)",
    )
    workloads_retry_s: float = Field(
        default=5.0, gt=0,
        description="first wait after a failed list or watch (doubling up to 60 s), and how long an owner that "
        "could not be read is not asked for again",
    )

    # --- evidence ---------------------------------------------------------------------------
    evidence_enabled: bool = True
    evidence_window_s: float = Field(default=600.0, ge=0, description="at most one dossier per GPU per window")
    evidence_timeout_s: float = Field(default=10.0, gt=0, description="per capture command")
    evidence_max_bytes: int = Field(default=256 * 1024, gt=0, description="per capture, before compression")
    evidence_kernel_lines: int = Field(default=200, ge=0, description="kernel-log lines kept around a fault")
    nvidia_smi: str = "nvidia-smi"
    lspci: str = "lspci"

    # --- health and metrics -----------------------------------------------------------------
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(default=9464, description="/healthz and /metrics; None disables")
