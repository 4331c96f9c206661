"""The agent's node identity token: read from the projected file, followed across the kubelet's
rotations, never logged, and sent with every record over SASL_SSL as the agent's Kafka principal."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer

from agents.identity import NodeToken
from agents.runtime import Agent
from agents.settings import AgentSettings
from models.node_identity import TOKEN_HEADER
from models.node_records import KERNEL_TOPIC
from tests.services import SecuredKafka

XID = "kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus."


def test_the_token_follows_the_kubelets_rotation(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "token"
    token = NodeToken(path, reread_s=3600)
    with caplog.at_level(logging.WARNING, logger="agents.identity"):
        assert token.headers() == []  # not projected (yet): records go without, the worker decides
        assert token.headers() == []
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 1
    path.write_text("eyJh.first.sig\n")
    assert token.headers() == [(TOKEN_HEADER, b"eyJh.first.sig")]
    # The kubelet writes a new file and renames it over the old one (atomic): a new inode.
    fresh = tmp_path / "token.new"
    fresh.write_text("eyJh.second.sig")
    os.replace(fresh, path)
    assert token.headers() == [(TOKEN_HEADER, b"eyJh.second.sig")]
    assert all("eyJh" not in r.getMessage() for r in caplog.records)


def test_settings_reject_sasl_without_a_password_or_with_plaintext() -> None:
    with pytest.raises(ValueError, match="needs sasl_username and sasl_password"):
        AgentSettings(security_protocol="SASL_SSL", sasl_username="agent")
    with pytest.raises(ValueError, match="security_protocol is PLAINTEXT"):
        AgentSettings(sasl_username="agent", sasl_password="pw")  # type: ignore[arg-type]


@pytest.mark.kafka
def test_the_agent_publishes_over_sasl_ssl_with_its_token(tmp_path: Path, secured_kafka: SecuredKafka) -> None:
    secured_kafka.grant_pipeline("", worker_group="xidpipe-worker")
    admin_options = secured_kafka.broker.client_options("admin")
    admin = KafkaAdminClient(bootstrap_servers=secured_kafka.bootstrap, **admin_options)
    try:
        if KERNEL_TOPIC not in admin.list_topics():
            admin.create_topics({KERNEL_TOPIC: {"num_partitions": 1, "replication_factor": 1}})
            admin.wait_for_topics([KERNEL_TOPIC], timeout_ms=15_000)
    finally:
        admin.close()
    node = f"gpu-node-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "kern.log"
    log.write_text(f"{XID}\nkernel: eth0 up\n{XID.replace('79', '48')}\n")
    (tmp_path / "token").write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln")
    security = secured_kafka.security("agent")
    settings = AgentSettings(
        node=node, bootstrap_servers=secured_kafka.bootstrap, state_dir=tmp_path / "state", follow=False,
        source="file", log_file=log, nvml_enabled=False, podresources_enabled=False, evidence_enabled=False,
        metrics_port=None, identity_token_file=tmp_path / "token", **security.model_dump(),
    )
    assert secured_kafka.passwords["agent"] not in repr(settings)
    assert Agent(settings).run() == 0

    consumer = KafkaConsumer(KERNEL_TOPIC, bootstrap_servers=secured_kafka.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=4000, **admin_options)
    try:
        mine = [m for m in consumer if m.key == node.encode()]
    finally:
        consumer.close()
    assert len(mine) == 2
    assert all(dict(m.headers)[TOKEN_HEADER] == b"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln" for m in mine)
