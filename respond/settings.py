"""The responder's settings: one object, loaded once at start (`service.config`: its own settings as
`XIDPIPE_RESPOND_<NAME>` or `respond_<name>` in the config file, the shared ones as `XIDPIPE_<NAME>`).

It has two sections, read under their own prefixes because other commands use them alone: `actions`
(the cordon executor, `XIDPIPE_ACTIONS_*`: `respond.cordon.settings.ActionSettings`, which `xidpipe
node` and `xidpipe breaker` read too) and `sinks` (tickets and chat, `XIDPIPE_SINKS_*`:
`respond.sinks.settings.SinkSettings`, which `xidpipe replay` reads too). The responder has one
database, `database_url`: its incidents, its action record, its ticket map, notification log and
silences. The responder is a Kafka principal of its own: its credentials are
`XIDPIPE_RESPOND_SASL_PASSWORD`, ...
"""

from __future__ import annotations

import os
import socket

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from models.kafka_security import KafkaClientSecurity
from models.leader_election import LeaseTimings
from respond.cordon.settings import ActionSettings
from respond.sinks.settings import SinkSettings
from service.config import ServiceSettings, shared


class RespondSettings(KafkaClientSecurity, ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_RESPOND_")
    service = "respond"

    bootstrap_servers: str = shared("bootstrap_servers", "127.0.0.1:9092",
                                    description="Kafka bootstrap servers, comma-separated")
    topic_prefix: str = shared("topic_prefix", "", description="prepended to every topic name (the worker's)")
    database_url: SecretStr = shared(
        "database_url", "sqlite:///var/xidpipe.db", validate_default=True,
        description="SQLAlchemy URL of the stream worker's database: the incidents the responder acts on, and "
        "where it records its actions, tickets, notifications and silences")
    group_id: str = Field(default="xidpipe-responder", description="Kafka consumer group")
    cluster: str = shared("cluster", "default", description="the cluster's name: the key of its fleet incidents, "
                          "shown in dossiers")
    partitions: int = shared("partitions", 8, ge=1, description="partitions of the pipeline's topics it creates "
                             "when missing: the stream worker's count")
    replication_factor: int = shared("replication_factor", 1, ge=1, description="for the topics it creates")
    cordon_retry_initial_s: float = Field(
        default=2.0, gt=0, description="a cordon that failed as retryable (API 429/5xx or unreachable past its "
        "own call deadline) is tried again after this, then after twice as long each time")
    cordon_retry_max_s: float = Field(default=300.0, gt=0, description="longest wait between cordon retries")
    cordon_pending_interval_s: float = Field(
        default=1.0, gt=0, description="how often due cordon retries are run and the breaker is checked for a "
        "reset (held cordons are offered again within this long of `xidpipe breaker reset`)")
    shutdown_grace_s: float = Field(
        default=3.0, gt=0, description="on a stop (SIGTERM, or the Lease lost) the work in flight (ticket "
        "refreshes, tickets, messages, the retry loops) gets this long to finish; the rest is cancelled and its "
        "requests left uncommitted for the next leader; elected, shorter than lease_duration_s - renew_deadline_s")
    quarantine_reconcile_interval_s: float = Field(
        default=60.0, gt=0, description="how often xidpipe's DeviceTaintRules are reconciled with the incidents "
        "(a closed incident's rule removed, a rule someone changed reported); a pass runs at start too")
    remediation_interval_s: float = Field(
        default=2.0, gt=0, description="how often the remediation loops are advanced (each pass reads each open "
        "loop's node and Jobs once) and their transitions told")
    metrics_host: str = Field(default="127.0.0.1", description="address of /metrics, /healthz and /readyz "
                              "(the chart binds the pod's IP)")
    metrics_port: int | None = Field(default=9466, description="port of /metrics, /healthz and /readyz; None: off")
    election: bool = Field(
        default=False, description="elect one acting replica through a coordination.k8s.io Lease (needs a "
        "cluster: XIDPIPE_KUBE_CONFIG); off for one machine and the demo, on in the Helm chart")
    lease_name: str = Field(default="xidpipe-respond", description="the election's Lease")
    lease_namespace: str = Field(
        default_factory=lambda: os.environ.get("POD_NAMESPACE") or "default",
        description="the Lease's namespace (default: the pod's, from POD_NAMESPACE)")
    identity: str = Field(
        default_factory=lambda: os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}",
        description="this replica's name in the Lease (default: the pod's, from POD_NAME)")
    lease_duration_s: float = Field(default=15.0, ge=1, description="a standby takes over this long after the "
                                    "last renewal it saw (the longest gap after a leader dies)")
    renew_deadline_s: float = Field(default=10.0, gt=0, description="a leader that could not renew for this long "
                                    "stops acting (fencing); shorter than lease_duration_s")
    retry_period_s: float = Field(default=2.0, gt=0, description="how often the Lease is renewed or read")

    gpu_watch: bool = Field(
        default=True, description="watch the GPU nodes' nvidia.com/gpu allocatable and the device plugin (when a "
        "cluster is configured), and publish each node's view on the kube topic for the stream to decide")
    gpu_count_label: str = Field(
        default="nvidia.com/gpu.count", description="the node label that names how many GPUs a node should have "
        "(GPU Feature Discovery's)")
    device_plugin_namespace: str | None = Field(
        default=None, description="the NVIDIA device plugin's namespace (gpu-operator, kube-system, ...); None: its "
        "pods are not watched (the chart grants list/watch on pods there only when it is set)")
    device_plugin_selector: str = Field(
        default="app=nvidia-device-plugin-daemonset", description="the label selector of the device plugin's pods "
        "(the GPU Operator's; the plugin's own chart labels them app.kubernetes.io/name=nvidia-device-plugin)")
    gpu_watch_recheck_s: float = Field(
        default=30.0, gt=0, description="a node whose GPU view is wrong is published again this often (for a few "
        "minutes, then at the heartbeat), so the stream's grace periods see it held")
    gpu_watch_heartbeat_s: float = Field(default=600.0, gt=0, description="a wrong GPU view is published at "
                                         "least this often after its first minutes")

    actions: ActionSettings = Field(default_factory=ActionSettings,
                                    description="the cordon executor's section (XIDPIPE_ACTIONS_*)")
    sinks: SinkSettings = Field(default_factory=SinkSettings,
                                description="the ticket and chat sinks' section (XIDPIPE_SINKS_*)")

    @property
    def database(self) -> str:
        """The database URL itself, for the engine that opens it (never for a log line)."""
        return self.database_url.get_secret_value()

    def lease_timings(self) -> LeaseTimings:
        return LeaseTimings(lease_duration_s=self.lease_duration_s, renew_deadline_s=self.renew_deadline_s,
                            retry_period_s=self.retry_period_s)

    @model_validator(mode="after")
    def _within_the_margin(self) -> RespondSettings:
        """An elected leader's writes and its shutdown must end before a standby may take over."""
        if not self.election:
            return self
        margin = self.lease_timings().margin_s
        if self.actions.api_write_timeout_s > margin:
            raise ValueError(f"XIDPIPE_ACTIONS_API_WRITE_TIMEOUT_S ({self.actions.api_write_timeout_s:g} s) must not "
                             f"exceed lease_duration_s - renew_deadline_s ({margin:g} s): a write could land after "
                             "a standby took over")
        if self.shutdown_grace_s >= margin:
            raise ValueError(f"XIDPIPE_RESPOND_SHUTDOWN_GRACE_S ({self.shutdown_grace_s:g} s) must be shorter than "
                             f"lease_duration_s - renew_deadline_s ({margin:g} s): a leader that lost its Lease must "
                             "have stopped before a standby may take over")
        return self
