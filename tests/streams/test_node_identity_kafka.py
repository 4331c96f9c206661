"""Node identity end to end, on the real kube-apiserver and a real broker with SASL_SSL and ACLs.

An agent pod's projected token (audience `xidpipe`, bound to its pod and so to its node) goes with
each record as a Kafka header; the worker, authenticated to Kafka as `worker` and to the API server
as the `xidpipe-stream` ServiceAccount of the chart, reviews it. A record for another node, one
without a token and one with a forged token are dead-lettered with the reason and never become
incidents; the genuine fault becomes an incident whose cordon candidate the responder, as
`responder`, handles and reports on the completed topic. The cluster's view of a node, which the
responder writes on the kube topic without a node token, is taken as it is.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kubernetes import client

from models.node_identity import TOKEN_HEADER
from models.signals.kube_gpus.records import KubeGpuView
from models.topics import topology
from respond.cordon.runtime import build_executor
from respond.responder import build_responder, run_responder
from respond.settings import RespondSettings
from respond.sinks.build import build_sinks
from respond.sinks.settings import SinkSettings
from streams.runner import WorkerProcess, produce, wait_caught_up
from streams.settings import WorkerSettings
from streams.store import Store
from streams.worker import prepare
from tests import store_reads
from tests.kube import agent_pod_token, kubeconfig_for, stream_token
from tests.polling import poll_async
from tests.services import SecuredKafka
from tests.streams.records import Kmsg

pytestmark = [pytest.mark.kafka, pytest.mark.k8s]

T0 = datetime(2026, 12, 1, 9, 0, 0, tzinfo=UTC)


def _read_all(secured_kafka: SecuredKafka, topic: str) -> list[Any]:
    consumer = KafkaConsumer(topic, bootstrap_servers=secured_kafka.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=4000, **secured_kafka.broker.client_options("admin"))
    try:
        return list(consumer)
    finally:
        consumer.close()


def test_a_record_for_another_node_never_becomes_an_incident(
    secured_kafka: SecuredKafka, control_plane: Any, admin_core: client.CoreV1Api, rbac_applied: object,
    postgres_database: str, tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:6]
    honest, victim = f"gpu-honest-{run}", f"gpu-victim-{run}"
    for name in (honest, victim):
        admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))
    token = agent_pod_token(admin_core, honest)[1].encode()

    prefix, app_id = f"nid-{run}.", f"nid-{run}-worker"
    secured_kafka.grant_pipeline(prefix, worker_group=app_id, responder_group=f"nid-{run}-responder")
    settings = WorkerSettings(
        bootstrap_servers=secured_kafka.bootstrap, database_url=postgres_database, app_id=app_id,
        topic_prefix=prefix, partitions=1, datadir=tmp_path / "faust", session_timeout_s=6.0,
        heartbeat_interval_s=1.0, commit_interval_s=0.5,
        verify_node_identity=True,
        node_identity_kubeconfig=kubeconfig_for(control_plane, stream_token(admin_core), tmp_path / "kubeconfig"),
        **secured_kafka.security("worker").model_dump(),
    )
    prepare(settings)
    topo = topology(prefix, 1)
    agent = secured_kafka.security("agent")
    signed = Kmsg(honest).xid(0, 79, T0)
    forged = Kmsg(victim).xid(0, 79, T0)  # the honest node's agent speaking for the victim
    produce(settings.bootstrap_servers, topo, [signed], security=agent, headers=[(TOKEN_HEADER, token)])
    produce(settings.bootstrap_servers, topo, [forged], security=agent, headers=[(TOKEN_HEADER, token)])
    produce(settings.bootstrap_servers, topo, [Kmsg(victim, seq=2000).xid(1, 79, T0)], security=agent)
    produce(settings.bootstrap_servers, topo, [Kmsg(victim, seq=3000).xid(2, 79, T0)], security=agent,
            headers=[(TOKEN_HEADER, token[:-8] + b"AAAAAAAA")])
    # The responder's GPU watch speaks for the cluster, not for a node: no node token on the kube topic.
    view = KubeGpuView(node=victim, record_id=f"kube:{victim}:1", observed_at=T0, capacity=8, allocatable=0,
                       since={"allocatable": T0 - timedelta(seconds=600)})
    produce(settings.bootstrap_servers, topo, [view], security=secured_kafka.security("responder"))

    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        wait_caught_up(settings, 90, worker)
        worker.terminate()
    finally:
        worker.kill()
    log_text = (tmp_path / "worker.log").read_text()
    assert token.decode() not in log_text and secured_kafka.passwords["worker"] not in log_text

    store = Store(postgres_database, settings.policy, settings.cluster)
    try:
        incidents = store_reads.incidents(store)
    finally:
        store.dispose()
    assert {(i["node"], i["component"]) for i in incidents} == {(honest, "gpu"), (victim, "node")}, incidents
    assert [i["codes"] for i in incidents if i["node"] == victim] == [["gpu_allocatable"]]
    assert _read_all(secured_kafka, topo.kube.dead_letter) == []

    dead = _read_all(secured_kafka, topo.kernel.dead_letter)
    reasons = sorted(dict(m.headers)["xidpipe-dlq-reason"].decode() for m in dead)
    assert reasons == ["node_identity_invalid_token", "node_identity_missing_token", "node_identity_node_mismatch"]
    assert all(m.key == victim.encode() for m in dead)
    mismatch = next(json.loads(m.value) for m in dead if b"mismatch" in dict(m.headers)["xidpipe-dlq-reason"])
    assert honest in mismatch["error"] and victim in mismatch["error"]

    # The responder, as its own principal, takes the honest node's cordon candidate and reports it (and the
    # candidate of the victim's node fault the cluster's view made, a genuine one).
    respond = RespondSettings(bootstrap_servers=secured_kafka.bootstrap, topic_prefix=prefix,
                              database_url=postgres_database, group_id=f"nid-{run}-responder",
                              **secured_kafka.security("responder").model_dump())
    executor = build_executor(respond.actions, database_url=postgres_database)
    sinks = build_sinks(SinkSettings(outbox_dir=tmp_path / "outbox", group_wait_s=0), postgres_database)
    responder = build_responder(respond, executor, sinks)
    asyncio.run(_respond_until_cordon(respond, responder,
                                      lambda: len({a.node for a in executor.store.recent(10)}) >= 2))
    completed = [json.loads(m.value) for m in _read_all(secured_kafka, topo.completed.name)]
    assert {c["node"] for c in completed} == {honest, victim}


def test_a_record_the_api_server_cannot_review_is_a_dead_letter_with_the_reason(
    secured_kafka: SecuredKafka, control_plane: Any, admin_core: client.CoreV1Api, rbac_applied: object,
    postgres_database: str, tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:6]
    node = f"gpu-node-{run}"
    admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=node)))
    token = agent_pod_token(admin_core, node)[1].encode()
    prefix, app_id = f"nidu-{run}.", f"nidu-{run}-worker"
    secured_kafka.grant_pipeline(prefix, worker_group=app_id)
    # The worker's reviews are refused (HTTP 403: an identity without `create tokenreviews`).
    settings = WorkerSettings(
        bootstrap_servers=secured_kafka.bootstrap, database_url=postgres_database, app_id=app_id,
        topic_prefix=prefix, partitions=1, datadir=tmp_path / "faust", session_timeout_s=6.0,
        heartbeat_interval_s=1.0, commit_interval_s=0.5, verify_node_identity=True,
        node_identity_kubeconfig=kubeconfig_for(control_plane, control_plane.token("nobody"), tmp_path / "nobody"),
        **secured_kafka.security("worker").model_dump(),
    )
    prepare(settings)
    topo = topology(prefix, 1)
    produce(settings.bootstrap_servers, topo, [Kmsg(node).xid(0, 79, T0)], security=secured_kafka.security("agent"),
            headers=[(TOKEN_HEADER, token)])
    worker = WorkerProcess(settings, tmp_path / "worker.log").start()
    try:
        wait_caught_up(settings, 90, worker)  # not held: dead-lettered after the bounded retries
        worker.terminate()
    finally:
        worker.kill()
    (dead,) = _read_all(secured_kafka, topo.kernel.dead_letter)
    assert dict(dead.headers)["xidpipe-dlq-reason"] == b"node_identity_unavailable" and dead.key == node.encode()
    error = json.loads(dead.value)["error"]
    assert "HTTP 403" in error and "3 attempts" in error and token.decode() not in error
    assert token.decode() not in (tmp_path / "worker.log").read_text()


async def _respond_until_cordon(settings: RespondSettings, responder: Any, decided: Callable[[], bool],
                                timeout: float = 60.0) -> None:
    """Run the responder until `decided()`: its action log holds the cordon decision."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_responder(settings, responder, stop))
    try:
        await poll_async("the cordon decision in the action log", lambda: task.done() or decided(), timeout)
    finally:
        stop.set()
        await task
    assert decided(), "the responder stopped before it decided the cordon"


@pytest.mark.parametrize(("verb", "group", "resource", "allowed"), [
    ("create", "authentication.k8s.io", "tokenreviews", True),
    ("create", "authorization.k8s.io", "subjectaccessreviews", False),
    ("patch", "", "nodes", False),
    ("list", "", "pods", False),
    ("get", "", "secrets", False),
    ("create", "", "serviceaccounts/token", False),
])
def test_the_stream_account_may_only_review_tokens(
    admin_client: client.ApiClient, rbac_applied: object, verb: str, group: str, resource: str, allowed: bool
) -> None:
    resource, _, sub = resource.partition("/")
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user="system:serviceaccount:xidpipe:xidpipe-stream",
        groups=["system:serviceaccounts", "system:serviceaccounts:xidpipe", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(verb=verb, group=group, resource=resource,
                                                        subresource=sub or None, namespace="xidpipe")))
    result = client.AuthorizationV1Api(admin_client).create_subject_access_review(review)
    assert result.status.allowed is allowed, result.status.reason
