"""The stream worker's settings: one object, loaded once at start (`service.config`: its own settings
as `XIDPIPE_WORKER_<NAME>` or `worker_<name>` in the config file, the shared ones as `XIDPIPE_<NAME>`).

Policy values are nested: `XIDPIPE_WORKER_POLICY__QUIET_PERIOD_S=3600`. The worker is a Kafka
principal of its own: its credentials are `XIDPIPE_WORKER_SASL_USERNAME`, ...
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from models.kafka_security import KafkaClientSecurity
from models.node_identity import DEFAULT_AGENT_ACCOUNT, DEFAULT_AUDIENCE
from models.stream_policy import PipelinePolicy
from service.config import ServiceSettings, shared


class WorkerSettings(KafkaClientSecurity, ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_WORKER_")
    service = "worker"

    bootstrap_servers: str = shared("bootstrap_servers", "127.0.0.1:9092",
                                    description="Kafka bootstrap servers, comma-separated")
    # security_protocol, sasl_*, ssl_*: `models.kafka_security.KafkaClientSecurity` (XIDPIPE_WORKER_SASL_PASSWORD, ...).
    database_url: str = shared(
        "database_url", "sqlite:///var/xidpipe.db",
        description="SQLAlchemy URL; SQLite for one machine, postgresql+psycopg://... in production",
    )
    app_id: str = Field(default="xidpipe-worker", description="Faust app id: the consumer group and table prefix")
    topic_prefix: str = shared(
        "topic_prefix", "", description="prepended to every topic name (isolates tests and staging on a shared broker)"
    )
    partitions: int = shared(
        "partitions", 8, ge=1,
        description="partitions of every node-keyed topic; all input topics must have the same count "
        "(co-partitioning). 8 lets up to 8 workers share the load",
    )
    replication_factor: int = shared("replication_factor", 1, ge=1, description="for the topics it creates")
    cluster: str = shared("cluster", "default", description="the cluster's name: the key of its fleet incidents, "
                          "shown in dossiers")
    datadir: Path = Field(default=Path("var/faust"), description="Faust's data directory")

    batch_max: int = Field(
        default=2000, ge=1,
        description="most records handled in one database transaction. Batches adapt to the load: a "
        "record that arrives while the database is idle is committed at once, and the records that arrive "
        "while a transaction runs make the next batch, up to this many",
    )
    batch_within_s: float = Field(
        default=0.05, ge=0,
        description="longest pause between transactions: after a transaction that took T the next starts T "
        "later, at most this long, unless a full batch is waiting, so a busy worker batches more and leaves "
        "CPU to the stream; a record that arrives at a quiet worker is committed at once",
    )
    store_process: bool = Field(
        default=True,
        description="run the database work in a process of its own, on another core than the stream (CPython "
        "runs one thread at a time); false: on a thread of the worker",
    )
    parser_idle_flush_s: float = Field(
        default=0.5, gt=0,
        description="a multi-line kernel record (identity + serial, fallen off the bus) still open after this "
        "long without a new line from its node is closed and handled",
    )
    parser_max_nodes: int = Field(
        default=20_000, ge=1,
        description="kernel-log parsers kept, one per node that sent lines: past this many the least recently fed "
        "are closed (their open record stored first) and dropped. A parser holds a few KB, so 20,000 cost ~100 MB",
    )
    parser_node_idle_s: float = Field(
        default=900.0, gt=0,
        description="a node that sent no kernel line for this long has its parser closed and dropped (a healthy node "
        "sends GPU lines rarely); what it learnt of the node's GPUs is kept for its next line",
    )
    parser_remembered_nodes: int = Field(
        default=100_000, ge=1,
        description="nodes whose dropped parser's GPU addresses, root ports and correctable AER counts are kept "
        "(about 300 bytes each), so a node that comes back parses as if never dropped",
    )
    sweep_interval_s: float = Field(
        default=10.0, gt=0, description="how often quiet incidents are resolved and unsent outbox rows resent"
    )
    outbox_resend_after_s: float = Field(
        default=5.0, gt=0, description="an outbox row unsent for this long is resent by the sweep"
    )
    outbox_keep_sent_s: float = Field(
        default=7 * 86400.0, ge=0,
        description="a sent outbox row is deleted this long after it was sent, with its idempotency key: it must "
        "outlast any redelivery of the records that decided it (7 days; 0: kept for ever). Each sweep deletes "
        "up to 10,000",
    )
    db_retry_max_s: float = Field(default=30.0, gt=0, description="longest backoff between database retries")

    session_timeout_s: float = Field(
        default=60.0, gt=0,
        description="Kafka consumer session timeout: how soon a crashed worker's partitions move (tests: 6)",
    )
    heartbeat_interval_s: float = Field(default=3.0, gt=0, description="tests: 1")
    commit_interval_s: float = Field(
        default=2.8, gt=0, description="how often acknowledged offsets are committed (Faust's default)"
    )
    fetch_max_wait_ms: int = Field(
        default=100, ge=1, le=1500,
        description="longest time the broker may hold a fetch of idle partitions, during which busy partitions "
        "are not fetched (Faust fixes it at 1500 ms; 100 ms bounds that stall)",
    )
    fetch_max_partition_bytes: int = Field(
        default=256 * 1024, ge=64 * 1024,
        description="most bytes one fetch returns per partition (Faust's consumer_max_fetch_size, 1 MiB by default). "
        "A lagging worker holds a fetch of each of its partitions (five input topics of `partitions` each): 1 MiB "
        "each was 60 MiB at 12 partitions, most of the memory a catching-up worker grew by. A record larger than "
        "this is still fetched, on its own",
    )
    stream_buffer_max: int | None = Field(
        default=None, ge=1,
        description="events fetched and decoded, waiting for the agent (Faust's stream_buffer_maxsize, 4096 by "
        "default): at four fifths of it a partition that adds to it is no longer fetched until it drains to two "
        "fifths. The agent moves events at once to the committer, which keeps up to 2 x batch_max besides, so a "
        "batch's worth here keeps it fed and more only adds memory while the worker lags. None: batch_max",
    )
    poll_max_records: int | None = Field(
        default=None, ge=1,
        description="records one poll takes from what aiokafka fetched (Faust's broker_max_poll_records; unbounded "
        "by default, when a lagging worker decoded every fetched record of every partition at once: up to 1 MiB "
        "a partition). The rest stays as fetched bytes. None: a quarter of batch_max",
    )
    web_enabled: bool = Field(default=False, description="serve Faust's web views (debugging)")
    web_port: int = 6066
    metrics_host: str = Field(default="127.0.0.1", description="address of /metrics, /healthz and /readyz "
                              "(the chart binds the pod's IP)")
    metrics_port: int | None = Field(default=9465, description="port of /metrics, /healthz and /readyz; None: off")

    verify_node_identity: bool = Field(
        default=False,
        description="accept a node record only with a valid agent token for its node (`streams.node_identity`); "
        "on in the manifests. Off (the local demo): any client allowed to write the node topics speaks for any "
        "node, and the worker says so at start",
    )
    node_identity_audience: str = Field(default=DEFAULT_AUDIENCE, description="the audience of the agents' tokens")
    node_identity_account: str = Field(
        default=DEFAULT_AGENT_ACCOUNT, description="the user name of the agents' ServiceAccount tokens"
    )
    node_identity_kubeconfig: Path | None = Field(
        default=None, description="kubeconfig for TokenReviews; None: the pod's in-cluster ServiceAccount"
    )
    node_identity_cache_size: int = Field(
        default=20_000, ge=1, description="token reviews remembered (each until its token expires): one per agent "
        "pod and token refresh, so a 10,000-node fleet fits"
    )
    node_identity_refused_ttl_s: float = Field(
        default=30.0, gt=0, description="how long a refused token's review is reused, so a flood of forged "
        "records costs one TokenReview per token and this period"
    )

    policy: PipelinePolicy = Field(default_factory=PipelinePolicy)
