"""Creating the pipeline's topics on the broker (the Kafka admin side of `models.topics`), and the
aiokafka security options every client of the stream worker uses."""

from __future__ import annotations

import logging
from typing import Any

from models.kafka_security import KafkaClientSecurity
from models.topics import Topology

log = logging.getLogger(__name__)


def aiokafka_security(security: KafkaClientSecurity | None) -> dict[str, Any]:
    """aiokafka keyword arguments for TLS and SASL (`models.kafka_security`); {} for none."""
    if security is None:
        return {}
    return security.aiokafka_options(ssl_context(security))


def ssl_context(security: KafkaClientSecurity) -> Any:
    """The TLS context of `security` (trusting `ssl_cafile`, presenting the client certificate for
    mutual TLS), or None when the protocol uses no TLS."""
    if not security.uses_tls:
        return None
    from aiokafka.helpers import create_ssl_context

    return create_ssl_context(
        cafile=str(security.ssl_cafile) if security.ssl_cafile else None,
        certfile=str(security.ssl_certfile) if security.ssl_certfile else None,
        keyfile=str(security.ssl_keyfile) if security.ssl_keyfile else None,
    )


async def ensure_topics(bootstrap: str, topo: Topology, replication_factor: int = 1, *,
                        security: KafkaClientSecurity | None = None) -> list[str]:
    """Create the topics (and dead-letter twins) that do not exist yet; returns the names created.

    Existing topics are left as they are; an input topic with another partition count than
    declared is reported, since it breaks co-partitioning. A principal the broker's ACLs do not let
    create topics (the responder) leaves them to the one that may (the worker) and says so.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAuthorizationFailedError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **aiokafka_security(security))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [(n, t.partitions) for t in topo.all for n in t.names]
        missing = [NewTopic(n, num_partitions=p, replication_factor=replication_factor)
                   for n, p in wanted if n not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAuthorizationFailedError:
                log.warning("not allowed to create topics (%d not visible to this principal); the stream worker "
                            "creates them", len(missing))
                return []
            except Exception as exc:  # another worker created them concurrently
                if "TopicAlreadyExists" not in type(exc).__name__ and "already exists" not in str(exc):
                    raise
        return [t.name for t in missing]
    finally:
        await admin.close()
