"""The local broker with SASL/SCRAM-SHA-512 over TLS and the StandardAuthorizer: who is let in, and
what each xidpipe principal may do (`xidpipe.localinfra.kafka_security.pipeline_grants`)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from models.node_records import KERNEL_TOPIC
from models.topics import topology
from tests.services import SecuredKafka
from xidpipe.localinfra.kafka_security import pipeline_grants

pytestmark = pytest.mark.kafka


def _prefix(secured_kafka: SecuredKafka) -> str:
    prefix = f"auth-{uuid.uuid4().hex[:8]}."
    secured_kafka.grant_pipeline(prefix, worker_group=f"{prefix}worker")
    admin = KafkaAdminClient(bootstrap_servers=secured_kafka.bootstrap, **secured_kafka.broker.client_options("admin"))
    try:
        names = [n for t in topology(prefix, 1).all for n in t.names]
        admin.create_topics({n: {"num_partitions": 1, "replication_factor": 1} for n in names})
        admin.wait_for_topics(names, timeout_ms=15_000)
    finally:
        admin.close()
    return prefix


def _producer(secured_kafka: SecuredKafka, options: dict[str, Any]) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=secured_kafka.bootstrap, acks="all", bootstrap_timeout_ms=5000,
                         max_block_ms=5000, request_timeout_ms=5000, delivery_timeout_ms=8000, **options)


def _options(secured_kafka: SecuredKafka, user: str, password: str | None = None) -> dict[str, Any]:
    return secured_kafka.security(user, password).kafka_python_options()


def test_an_anonymous_client_is_refused(secured_kafka: SecuredKafka) -> None:
    # Plain TCP against the TLS listener, and TLS without SASL: neither gets an answer.
    for options in ({}, {"security_protocol": "SSL", "ssl_cafile": str(secured_kafka.broker.ca_file)}):
        began = time.monotonic()
        with pytest.raises(KafkaError):
            KafkaAdminClient(bootstrap_servers=secured_kafka.bootstrap, bootstrap_timeout_ms=3000,
                             request_timeout_ms=3000, **options).describe_cluster()
        assert time.monotonic() - began < 30


def test_wrong_credentials_are_refused(secured_kafka: SecuredKafka) -> None:
    with pytest.raises(KafkaError):
        _producer(secured_kafka, _options(secured_kafka, "agent", "not-the-password"))
    with pytest.raises(KafkaError):
        _producer(secured_kafka, _options(secured_kafka, "intruder", "whatever"))


def test_the_agent_writes_the_node_topics_and_nothing_else(secured_kafka: SecuredKafka) -> None:
    prefix = _prefix(secured_kafka)
    topo = topology(prefix, 1)
    producer = _producer(secured_kafka, _options(secured_kafka, "agent"))
    try:
        for spec in topo.agent_inputs:
            meta = producer.send(spec.name, key=b"gpu-node-1", value=b"{}").get(timeout=10)
            assert meta.topic == spec.name and meta.offset == 0
        # not the cluster's view of the node either: only the responder speaks for the cluster
        for name in (topo.actions.name, topo.incidents.name, topo.completed.name, topo.kernel.dead_letter,
                     topo.kube.name):
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send(name, key=b"gpu-node-1", value=b"{}").get(timeout=10)
    finally:
        producer.close(timeout=5)

    consumer = KafkaConsumer(bootstrap_servers=secured_kafka.bootstrap, group_id=None, enable_auto_commit=False,
                             bootstrap_timeout_ms=5000, **_options(secured_kafka, "agent"))
    try:
        consumer.assign([TopicPartition(topo.kernel.name, 0)])
        consumer.seek(TopicPartition(topo.kernel.name, 0), 0)
        with pytest.raises(TopicAuthorizationFailedError):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                assert not consumer.poll(timeout_ms=500), "the agent read a node topic"
    finally:
        consumer.close()


def test_the_responder_reads_actions_and_may_not_read_node_topics(secured_kafka: SecuredKafka) -> None:
    prefix = _prefix(secured_kafka)
    topo = topology(prefix, 1)
    worker = _producer(secured_kafka, _options(secured_kafka, "worker"))
    try:
        worker.send(topo.actions.name, key=b"gpu-node-1", value=b'{"kind": "ticket"}').get(timeout=10)
        with pytest.raises(TopicAuthorizationFailedError):  # the worker may not speak for a node either
            worker.send(topo.kernel.name, key=b"gpu-node-1", value=b"{}").get(timeout=10)
    finally:
        worker.close(timeout=5)

    def read(user: str, topic: str, group: str) -> list[bytes]:
        consumer = KafkaConsumer(topic, bootstrap_servers=secured_kafka.bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=6000, heartbeat_interval_ms=1000,
                                 bootstrap_timeout_ms=5000, **_options(secured_kafka, user))
        try:
            got: list[bytes] = []
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    got.extend(r.value for r in records)
            return got
        finally:
            consumer.close()

    assert read("responder", topo.actions.name, "xidpipe-responder") == [b'{"kind": "ticket"}']
    responder = _producer(secured_kafka, _options(secured_kafka, "responder"))
    try:  # the cluster's view of a node (its GPU allocatable, its device plugin) is the responder's to write
        assert responder.send(topo.kube.name, key=b"gpu-node-1", value=b"{}").get(timeout=10).topic == topo.kube.name
    finally:
        responder.close(timeout=5)
    with pytest.raises(KafkaError):  # not its topic, not its group
        read("responder", topo.kernel.name, f"{prefix}worker")


def test_a_sasl_plaintext_broker_authenticates_without_tls() -> None:
    from tests.infra.test_kafka import _require_jars
    from xidpipe.localinfra.kafka import LocalKafka
    from xidpipe.localinfra.process import LocalInfraError

    _require_jars()
    broker = LocalKafka(scram_users={"agent": "agent-secret"})
    try:
        broker.start()
    except LocalInfraError as exc:
        pytest.fail(f"a SASL_PLAINTEXT broker did not start: {exc}")
    try:
        props = (broker.work_dir / "server.properties").read_text()
        assert "BROKER:SASL_PLAINTEXT" in props and "StandardAuthorizer" in props
        assert "agent-secret" not in props  # SCRAM users live in the metadata log, not the config
        assert (broker.work_dir / "server.properties").stat().st_mode & 0o077 == 0
        broker.grant(pipeline_grants())
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, **broker.client_options("admin"))
        try:
            admin.create_topics({KERNEL_TOPIC: {"num_partitions": 1, "replication_factor": 1}})
            admin.wait_for_topics([KERNEL_TOPIC], timeout_ms=15_000)
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", **broker.client_options("agent"))
        try:
            assert producer.send(KERNEL_TOPIC, key=b"n", value=b"{}").get(timeout=10).offset == 0
        finally:
            producer.close(timeout=5)
        with pytest.raises(KafkaError):
            KafkaProducer(bootstrap_servers=broker.bootstrap, bootstrap_timeout_ms=5000,
                          **{**broker.client_options("agent"), "sasl_plain_password": "guess"})
    finally:
        broker.stop()
