"""`xidpipe kafka acls`'s settings (`service.config`: its own as `XIDPIPE_KAFKA_ADMIN_<NAME>`, the shared
bootstrap servers and topic prefix as `XIDPIPE_BOOTSTRAP_SERVERS` and `XIDPIPE_TOPIC_PREFIX`): the
principal that manages the cluster's ACLs (a super user, or one with ALTER and DESCRIBE on the
cluster), and the names of the pipeline's principals and consumer groups; the flags override them."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from models.kafka_security import KafkaClientSecurity
from service.config import XidpipeSettings, shared


class KafkaAdminSettings(KafkaClientSecurity, XidpipeSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_KAFKA_ADMIN_")
    service = "kafka_admin"
    # security_protocol, sasl_*, ssl_*: the admin principal's (`models.kafka_security.KafkaClientSecurity`).

    bootstrap_servers: str = shared("bootstrap_servers", "127.0.0.1:9092",
                                    description="Kafka bootstrap servers, comma-separated")
    topic_prefix: str = shared("topic_prefix", "", description="prepended to every topic name, as the services have it")
    agent_principal: str = Field(default="agent", description="the agents' SCRAM user (User:<name> in the ACLs)")
    worker_principal: str = Field(default="worker", description="the stream workers' SCRAM user")
    responder_principal: str = Field(default="responder", description="the responders' SCRAM user")
    worker_group: str = Field(default="xidpipe-worker", description="the workers' consumer group and Faust app id "
                              "(XIDPIPE_WORKER_APP_ID)")
    responder_group: str = Field(default="xidpipe-responder", description="the responders' consumer group "
                                 "(XIDPIPE_RESPOND_GROUP_ID)")
    agent_read_back: bool = Field(
        default=False, description="also grant the agents READ on the node topics, for their read-back after a "
        "crash (docs/agent.md); off: that read-back is refused and the records are sent again, which the worker "
        "drops as duplicates, and no node's agent may read another node's records")
