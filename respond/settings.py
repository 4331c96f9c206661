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

from pydantic import Field, SecretStr
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
