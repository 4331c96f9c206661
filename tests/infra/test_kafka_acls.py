"""`xidpipe kafka acls plan|apply`: the per-principal ACLs of `models.kafka_grants` on a cluster with
SASL/SCRAM over TLS and the StandardAuthorizer (the `secured_kafka` broker), as its admin: applied
once and idempotent, after which the worker reconciles a topic's config, the agent reads back its
node's partition (with `agent_read_back`), and a principal without the grant is refused."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import TopicAuthorizationFailedError

from agents.metrics import Metrics
from agents.publisher import Publisher
from agents.spool import Spool
from models.kafka_grants import pipeline_grants
from models.topics import topology
from streams.topics import aiokafka_security, ensure_topics, reconcile_configs
from tests.services import SecuredKafka
from xidpipe.cli import main

pytestmark = pytest.mark.kafka


def test_every_right_the_services_use_is_granted_with_its_reason() -> None:
    grants = pipeline_grants(topic_prefix="p.")
    assert all(g.reason for g in grants)
    worker = {(g.operation, g.name, g.pattern) for g in grants if g.principal == "worker"}
    assert {("DESCRIBE_CONFIGS", "p.xidpipe.", "PREFIXED"), ("ALTER_CONFIGS", "p.xidpipe.", "PREFIXED")} <= worker
    assert not [g for g in grants if g.principal == "agent" and g.operation != "WRITE"]
    read_back = pipeline_grants(topic_prefix="p.", agent_read_back=True)
    node_topics = {t.name for t in topology("p.", 1).agent_inputs}  # not the kube topic: the responder writes it
    assert {g.name for g in read_back if g.principal == "agent" and g.operation == "READ"} == node_topics


@pytest.fixture
def admin_env(secured_kafka: SecuredKafka, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    options = secured_kafka.broker.client_options("admin")
    env = {"XIDPIPE_BOOTSTRAP_SERVERS": secured_kafka.bootstrap,
           "XIDPIPE_KAFKA_ADMIN_SECURITY_PROTOCOL": "SASL_SSL", "XIDPIPE_KAFKA_ADMIN_SASL_USERNAME": "admin",
           "XIDPIPE_KAFKA_ADMIN_SASL_PASSWORD": options["sasl_plain_password"],
           "XIDPIPE_KAFKA_ADMIN_SSL_CAFILE": options["ssl_cafile"]}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def _acls(capsys: pytest.CaptureFixture[str], action: str, prefix: str, *extra: str) -> tuple[int, Any]:
    code = main(["kafka", "acls", action, "--topic-prefix", prefix, "--worker-group", f"{prefix}worker",
                 "--responder-group", f"{prefix}responder", *extra, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def _state_config(secured_kafka: SecuredKafka, topic: str) -> dict[str, str]:
    admin = KafkaAdminClient(bootstrap_servers=secured_kafka.bootstrap, **secured_kafka.broker.client_options("admin"))
    try:
        found = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        (by_name,) = found.values()
        return {k: (v.get("value") if isinstance(v, dict) else v) for k, v in by_name[topic].items()}
    finally:
        admin.close()


def _as_an_earlier_release_made_it(secured_kafka: SecuredKafka, topic: str) -> None:
    """The state topic as an earlier release made it: delete, one hour."""
    admin = KafkaAdminClient(bootstrap_servers=secured_kafka.bootstrap, **secured_kafka.broker.client_options("admin"))
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "delete",
                                                                  "retention.ms": "3600000"})])
        admin.wait_for_topics([topic], timeout_ms=15_000)
    finally:
        admin.close()


async def _reconcile_as(secured_kafka: SecuredKafka, user: str, topic: str, configs: dict[str, str]) -> None:
    """The worker's config reconciliation (`streams.topics.reconcile_configs`) as another principal."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=secured_kafka.bootstrap,
                                **aiokafka_security(secured_kafka.security(user)))
    await admin.start()
    try:
        await reconcile_configs(admin, {topic: configs})
    finally:
        await admin.close()


def _produce(secured_kafka: SecuredKafka, topic: str, node: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=secured_kafka.bootstrap, acks="all",
                             **secured_kafka.security("agent").kafka_python_options())
    try:
        for n in range(count):
            producer.send(topic, key=node.encode(), value=json.dumps({"record_id": f"r{n}"}).encode())
        producer.flush(timeout=15)
    finally:
        producer.close(timeout=5)


def _read_back(secured_kafka: SecuredKafka, tmp_path: Path, node: str, topic: str) -> set[str]:
    """The agent's own read-back after a crash (`agents.publisher.Publisher._read_back`), as `agent`."""
    metrics = Metrics()
    publisher = Publisher(Spool(tmp_path / f"spool-{uuid.uuid4().hex[:6]}", metrics), metrics, node=node,
                          bootstrap_servers=secured_kafka.bootstrap, on_acked=lambda n: None,
                          security=secured_kafka.security("agent").kafka_python_options())
    try:
        return publisher._read_back([topic], None)
    finally:
        publisher.close()


def test_acls_apply_once_and_the_services_may_do_what_they_need(
    secured_kafka: SecuredKafka, admin_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"acl-{uuid.uuid4().hex[:6]}."
    expected = pipeline_grants(topic_prefix=prefix, worker_group=f"{prefix}worker",
                               responder_group=f"{prefix}responder", agent_read_back=True)
    code, planned = _acls(capsys, "plan", prefix, "--agent-read-back")
    assert code == 0 and planned["missing"] == len(expected) and all(g["reason"] for g in planned["grants"])
    code, applied = _acls(capsys, "apply", prefix, "--agent-read-back")
    assert code == 0 and applied["created"] == len(expected)
    code, again = _acls(capsys, "apply", prefix, "--agent-read-back")
    assert code == 0 and again["created"] == 0  # idempotent
    code, planned = _acls(capsys, "plan", prefix, "--agent-read-back")
    assert planned["missing"] == 0 and all(g["present"] for g in planned["grants"])

    # The worker creates the topics and reconciles a config that drifted (DESCRIBE_CONFIGS, ALTER_CONFIGS).
    topo = topology(prefix, 1)
    worker = secured_kafka.security("worker")
    _as_an_earlier_release_made_it(secured_kafka, topo.state.name)
    # Principals without the grant may not: the responder does not see the topic, the agent (it writes the
    # topic, so it sees it) may neither read nor change its configs.
    asyncio.run(ensure_topics(secured_kafka.bootstrap, topo, security=secured_kafka.security("responder")))
    wanted = topo.state.broker_configs(1)[topo.state.name]
    asyncio.run(_reconcile_as(secured_kafka, "agent", topo.state.name, wanted))
    assert _state_config(secured_kafka, topo.state.name)["cleanup.policy"] == "delete"
    assert "not allowed to read the configs of topic " + topo.state.name in caplog.text
    every = [n for t in topo.all for n in t.names]
    assert len(asyncio.run(ensure_topics(secured_kafka.bootstrap, topo, security=worker))) == len(every) - 1  # the rest
    deadline = time.monotonic() + 15  # the broker applies the change through its metadata log
    while _state_config(secured_kafka, topo.state.name)["cleanup.policy"] != "compact" and time.monotonic() < deadline:
        time.sleep(0.2)
    config = _state_config(secured_kafka, topo.state.name)
    assert (config["cleanup.policy"], config["retention.ms"]) == ("compact", "-1")

    # The agent's read-back finds its node's records.
    _produce(secured_kafka, topo.kernel.name, "gpu-node-7", 3)
    assert _read_back(secured_kafka, tmp_path, "gpu-node-7", topo.kernel.name) == {"r0", "r1", "r2"}


def test_without_the_read_back_grant_the_agent_may_not_read(
    secured_kafka: SecuredKafka, admin_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    prefix = f"acl-{uuid.uuid4().hex[:6]}."
    code, applied = _acls(capsys, "apply", prefix)
    assert code == 0 and applied["created"] == len(pipeline_grants(topic_prefix=prefix))
    topo = topology(prefix, 1)
    asyncio.run(ensure_topics(secured_kafka.bootstrap, topo, security=secured_kafka.security("worker")))
    _produce(secured_kafka, topo.kernel.name, "gpu-node-7", 3)
    # The records are there, but not for the agent: its read-back is refused (the publisher logs it and
    # sends those records again, which the worker drops as duplicates).
    with pytest.raises(TopicAuthorizationFailedError):
        _read_back(secured_kafka, tmp_path, "gpu-node-7", topo.kernel.name)


def test_a_principal_that_may_not_manage_acls_is_one_line_and_status_3(
    secured_kafka: SecuredKafka, admin_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XIDPIPE_KAFKA_ADMIN_SASL_USERNAME", "worker")
    monkeypatch.setenv("XIDPIPE_KAFKA_ADMIN_SASL_PASSWORD", secured_kafka.passwords["worker"])
    assert main(["kafka", "acls", "apply", "--topic-prefix", "acl-refused."]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("xidpipe kafka: ") and len(err.splitlines()) == 1
    assert secured_kafka.passwords["worker"] not in err
