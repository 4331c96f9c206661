"""Creating the pipeline's topics on the broker and keeping their configuration as declared (the Kafka
admin side of `models.topics`), and the aiokafka security options every client of the stream worker uses."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int8, Int16, Int32, Schema, String

from models.kafka_security import KafkaClientSecurity
from models.topics import Topology, config_changes

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
    """Create the topics (and dead-letter twins) that do not exist yet, with their declared
    configuration (`models.topics.TopicConfig`), and set that configuration on those that exist where
    it differs (an incremental change: other configs of the topic stay). Returns the names created.

    An input topic with fewer partitions than declared is reported, not grown: growing it moves
    nodes to other partitions, and a node's records would be read out of order. A principal the
    broker's ACLs do not let create or configure topics (the responder) leaves that to the one that
    may (the worker) and says so.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **aiokafka_security(security))
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        configs = {n: c for t in topo.all for n, c in t.broker_configs(replication_factor).items()}
        wanted = [(n, t.partitions) for t in topo.all for n in t.names]
        missing = [NewTopic(n, num_partitions=p, replication_factor=replication_factor, topic_configs=configs[n])
                   for n, p in wanted if n not in existing]
        created = await _create(admin, missing) if missing else []
        if created is None:
            return []
        # Every topic but those just made as declared: a topic another worker made meanwhile is one of them.
        present = [n for n, _ in wanted if n not in created]
        if present:
            await reconcile_configs(admin, {n: configs[n] for n in present})
            await _check_partitions(admin, topo, present)
        return created
    finally:
        await admin.close()


async def _create(admin: Any, topics: list[Any]) -> list[str] | None:
    """Create `topics`; returns the names created (not those another worker created first), or None
    when this principal may not create topics."""
    from aiokafka.errors import TopicAlreadyExistsError, TopicAuthorizationFailedError, for_code

    try:
        response = await admin.create_topics(topics)
    except TopicAuthorizationFailedError:
        response = None
    created: list[str] = []
    for name, error_code, *rest in (response.topic_errors if response is not None else []):
        error = for_code(error_code) if error_code else None
        if error is None:
            created.append(name)
        elif error is TopicAuthorizationFailedError:
            response = None
        elif error is not TopicAlreadyExistsError:
            raise error(f"creating topic {name}: {rest[0] if rest else ''}")
    if response is None:
        log.warning("not allowed to create topics (%d not visible to this principal); the stream worker creates "
                    "them", len(topics))
        return None
    return created


async def topic_configs(admin: Any, names: list[str], wait_s: float = 10.0) -> dict[str, dict[str, str | None]]:
    """The current configs of the topics `names` (waiting up to `wait_s` for a topic just created to be
    known to the broker asked)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    out: dict[str, dict[str, str | None]] = {}
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        unknown: list[str] = []
        todo = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names if n not in out]
        for response in await admin.describe_configs(todo):
            for error_code, error_message, _type, name, entries in response.resources:
                if error_code == _UNKNOWN_TOPIC and asyncio.get_running_loop().time() < deadline:
                    unknown.append(name)
                elif error_code in _NOT_ALLOWED:  # a principal that may not read configs (the responder)
                    log.warning("not allowed to read the configs of topic %s; the stream worker keeps them", name)
                    out[name] = {}
                elif error_code:
                    raise RuntimeError(f"describing topic {name} failed: {error_code} {error_message}")
                else:
                    out[name] = {entry[0]: entry[1] for entry in entries}
        if not unknown:
            return out
        await asyncio.sleep(0.2)


async def reconcile_configs(admin: Any, wanted: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Set the configs of `wanted` that differ on the broker; returns, per topic, what was changed."""
    from aiokafka.errors import TopicAuthorizationFailedError, for_code

    current = await topic_configs(admin, sorted(wanted))
    changes = {n: ch for n, w in wanted.items() if current.get(n) and (ch := config_changes(w, current[n]))}
    if not changes:
        return {}
    request = IncrementalAlterConfigsRequest([(_TOPIC_RESOURCE, n, [(k, _SET, v) for k, v in sorted(ch.items())])
                                              for n, ch in sorted(changes.items())])
    response = await admin._send_request(request)
    for error_code, error_message, _type, name in response.responses:
        if error_code:
            error = for_code(error_code)
            if error is TopicAuthorizationFailedError or "Authorization" in error.__name__:
                log.warning("not allowed to configure topic %s; the stream worker does", name)
                continue
            raise error(f"configuring topic {name}: {error_message}")
    for name, ch in sorted(changes.items()):
        before = {k: current.get(name, {}).get(k) for k in ch}
        log.warning("topic %s reconfigured: %s (was %s)", name, ch, before, extra={"topic": name})
    return changes


async def _check_partitions(admin: Any, topo: Topology, names: list[str]) -> None:
    declared = {n: t.partitions for t in topo.all for n in t.names}
    for meta in await admin.describe_topics(names):
        have = len(meta.get("partitions") or [])
        name = meta.get("topic")
        if have and name in declared and have != declared[name]:
            log.error("topic %s has %d partitions, %d declared: co-partitioning by node needs one count for all "
                      "input topics; change it by hand (see docs/kafka.md)", name, have, declared[name],
                      extra={"topic": name})


_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION
_NOT_ALLOWED = (29, 31)  # TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED
_TOPIC_RESOURCE = 2  # ConfigResourceType.TOPIC
_SET = 0  # IncrementalAlterConfigs operation SET


class _IncrementalAlterConfigsResponseV0(Response):  # type: ignore[misc]
    API_KEY = 44
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("responses", Array(("error_code", Int16), ("error_message", String("utf-8")), ("resource_type", Int8),
                            ("resource_name", String("utf-8")))),
    )


class _IncrementalAlterConfigsRequestV0(RequestStruct):  # type: ignore[misc]
    """Kafka's IncrementalAlterConfigs (KIP-339, brokers 2.3+), which aiokafka's admin client lacks:
    it changes the configs named and leaves the others, where AlterConfigs replaces them all."""

    API_KEY = 44
    API_VERSION = 0
    RESPONSE_TYPE = _IncrementalAlterConfigsResponseV0
    SCHEMA = Schema(
        ("resources", Array(("resource_type", Int8), ("resource_name", String("utf-8")),
                            ("configs", Array(("name", String("utf-8")), ("config_operation", Int8),
                                              ("value", String("utf-8")))))),
        ("validate_only", Boolean),
    )


class IncrementalAlterConfigsRequest(Request[_IncrementalAlterConfigsRequestV0]):  # type: ignore[misc]
    API_KEY = 44

    def __init__(self, resources: list[Any], validate_only: bool = False) -> None:
        self._resources = resources
        self._validate_only = validate_only

    def build(self, request_struct_class: type[_IncrementalAlterConfigsRequestV0]) -> _IncrementalAlterConfigsRequestV0:
        return request_struct_class(self._resources, self._validate_only)
