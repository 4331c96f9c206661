"""The cordon lane against the real kube-apiserver: each offer is decided afresh by the YAML policy on
the incident's occurrence times and pods (from the history, SQLite here); retryable failures are
retried with backoff until the cordon lands; a cordon held by the breaker lands after a reset."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kubernetes import client
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.migrate import upgrade
from history.tables import FaultEvent, Incident
from models.cordon_policy import Breaker, CordonPolicy, Drain
from models.cordon_retry import RetryBackoff
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon.policy_file import load_policy
from respond.cordon.retry import Backoff
from respond.cordon_lane import CordonLane
from tests.kube import PodFactory, unique
from tests.respond.cordon.conftest import ExecutorFactory, NodeFactory

EXAMPLE = Path(__file__).resolve().parents[3] / "deploy" / "policy.example.yaml"
T0 = datetime(2026, 11, 30, 8, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    e = make_engine(f"sqlite:///{tmp_path / 'history.db'}")
    upgrade(e)
    yield e
    e.dispose()


def open_incident(engine: sa.Engine, node: str, codes: list[str], family: str, category: str,
                  pods: list[str] | None = None) -> str:
    incident_id = f"v2:{uuid.uuid4().hex[:12]}@x"
    with Session(engine) as s:
        s.add(Incident(
            incident_id=incident_id, fingerprint=incident_id[:15], node=node, gpu="0000:63:00.0", family=family,
            status="open", category=category, reason="test", count=0, first_seen=T0, last_seen=T0, opened_at=T0,
            updated_at=T0, resolved_at=None, previous_incident_id=None, gpu_uuid="GPU-5d8c2a1e", serial=None,
            pci="0000:63:00.0", codes=codes, pods=pods or [], processes=[], workloads=[], immediate_action=None,
            investigatory_action=None, description=None, cordon_requested=False, version=1,
        ))
        s.commit()
    return incident_id


def fault(engine: sa.Engine, incident_id: str, at: datetime, xid: int, *, counted: bool | None = True,
          pod: tuple[str, str] | None = None) -> None:
    """One fault report of the incident, as the stream writes it (the row's count and last_seen follow)."""
    with Session(engine) as s:
        row = s.get(Incident, incident_id)
        assert row is not None
        s.add(FaultEvent(
            node=row.node, content_hash=uuid.uuid4().hex, record_id=uuid.uuid4().hex, sources="kernel",
            occurred_at=at, ingested_at=at, kind="xid", family=row.family, code=f"Xid {xid}", xid=xid,
            gpu=row.gpu, message="m", raw="r", attribution={}, incident_id=incident_id, counted=counted,
            namespace=pod[0] if pod else None, pod=pod[1] if pod else None,
        ))
        if counted is not False:
            row.count += 1
        row.first_seen, row.last_seen = min(row.first_seen, at), max(row.last_seen, at)
        s.commit()


def offer(lane: CordonLane, incident_id: str) -> Any:
    return asyncio.run(lane.offer(incident_id)).result


def test_contained_ecc_twice_within_a_day_is_cordoned_at_the_second_fault(
    engine: sa.Engine, admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    node = make_node(pool=unique("pool"))
    lane = CordonLane(engine, make_executor(load_policy(EXAMPLE)))
    inc = open_incident(engine, node, ["Xid 94"], "memory", "hardware")
    fault(engine, inc, T0, 94)
    fault(engine, inc, T0 + timedelta(seconds=1), 94, counted=False)  # the NVML view of the same fault

    first = offer(lane, inc)
    assert (first.decision, first.outcome) == ("not_needed", "skipped")
    assert "1 occurrence(s)" in first.reason and not admin_core.read_node(node).spec.unschedulable

    fault(engine, inc, T0 + timedelta(hours=20), 94)
    second = offer(lane, inc)
    assert (second.decision, second.outcome) == ("cordon", "done")
    assert "contained-ecc-repeats: 2 occurrence(s)" in second.reason
    assert admin_core.read_node(node).spec.unschedulable
    assert lane.pending.all() == []


def test_an_nvlink_burst_refused_is_cordoned_on_the_next_burst(
    engine: sa.Engine, admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    node = make_node(pool=unique("pool"))
    lane = CordonLane(engine, make_executor(load_policy(EXAMPLE)))
    inc = open_incident(engine, node, ["Xid 74"], "nvlink", "interconnect")
    for minute in (0, 1):
        fault(engine, inc, T0 + timedelta(minutes=minute), 74)
    refused = offer(lane, inc)
    assert refused.decision == "not_needed" and "below the threshold of 3" in refused.reason
    assert not admin_core.read_node(node).spec.unschedulable

    fault(engine, inc, T0 + timedelta(minutes=40), 74)
    assert offer(lane, inc).decision == "cordon"
    assert admin_core.read_node(node).spec.unschedulable


def unreachable(worker_configuration: client.Configuration) -> KubeNodes:
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = client.Configuration(host=f"https://127.0.0.1:{port}", api_key=worker_configuration.api_key,
                                api_key_prefix=worker_configuration.api_key_prefix)
    conf.retries = 0
    return KubeNodes(client.ApiClient(conf), reporting_instance="t", backoff=Backoff(deadline_s=0.3, initial_s=0.05))


def test_a_retryable_failure_is_retried_with_backoff_until_the_cordon_lands(
    engine: sa.Engine, admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory,
    worker_configuration: client.Configuration,
) -> None:
    node = make_node(pool=unique("pool"))
    executor = make_executor()
    reachable = executor.nodes
    executor.nodes = unreachable(worker_configuration)  # the API server is down for a while
    clock = Clock()
    lane = CordonLane(engine, executor, backoff=RetryBackoff(initial_s=10, max_s=60), clock=clock)
    inc = open_incident(engine, node, ["Xid 79"], "gpu_lost", "hardware")
    fault(engine, inc, T0, 79)

    failed = offer(lane, inc)
    assert (failed.outcome, failed.retryable) == ("failed", True)
    [pending] = lane.pending.all()
    assert (pending.kind, pending.attempts, pending.due_at) == ("retry", 1, clock.now + timedelta(seconds=10))

    assert asyncio.run(lane.tick()) == []  # not due yet
    clock.now += timedelta(seconds=10)
    [again] = asyncio.run(lane.tick())
    assert again.result.outcome == "failed" and again.followup.attempts == 2
    assert lane.pending.all()[0].due_at == clock.now + timedelta(seconds=20)  # the wait doubled

    executor.nodes = reachable  # the API server is back
    clock.now += timedelta(seconds=20)
    [landed] = asyncio.run(lane.tick())
    assert (landed.result.decision, landed.result.outcome) == ("cordon", "done")
    assert admin_core.read_node(node).spec.unschedulable
    assert lane.pending.all() == []


def test_a_pending_retry_ends_with_its_incident(
    engine: sa.Engine, make_node: NodeFactory, make_executor: ExecutorFactory,
    worker_configuration: client.Configuration,
) -> None:
    executor = make_executor(nodes=unreachable(worker_configuration))
    clock = Clock()
    lane = CordonLane(engine, executor, backoff=RetryBackoff(initial_s=1), clock=clock)
    inc = open_incident(engine, make_node(pool=unique("pool")), ["Xid 79"], "gpu_lost", "hardware")
    fault(engine, inc, T0, 79)
    assert offer(lane, inc).retryable and len(lane.pending.all()) == 1

    with Session(engine) as s:
        row = s.get(Incident, inc)
        assert row is not None
        row.status = "resolved"
        s.commit()
    clock.now += timedelta(seconds=5)
    [ended] = asyncio.run(lane.tick())
    assert ended.result is None and "resolved" in ended.followup.reason
    assert lane.pending.all() == []


def test_a_candidate_read_after_its_incident_was_merged_is_skipped_not_refused(
    engine: sa.Engine, admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    # The stream offers a GPU incident's candidate when it opens; node state read later moves its faults
    # to the workload's incident and resolves it, empty, before the responder reads the candidate.
    node = make_node(pool=unique("pool"))
    lane = CordonLane(engine, make_executor(load_policy(EXAMPLE)))
    inc = open_incident(engine, node, ["Xid 79"], "gpu_lost", "hardware")
    with Session(engine) as s:
        row = s.get(Incident, inc)
        assert row is not None
        row.status, row.resolved_at, row.merged_into, row.count = "resolved", T0, "v2:other@x", 0
        s.commit()
    merged = asyncio.run(lane.offer(inc))
    assert merged.result is None and "resolved" in merged.followup.reason
    assert not admin_core.read_node(node).spec.unschedulable and lane.pending.all() == []


def test_a_cordon_held_by_the_breaker_lands_after_the_reset(
    engine: sa.Engine, admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory
) -> None:
    pool = unique("pool")
    first, second = make_node(pool=pool), make_node(pool=pool)
    policy = CordonPolicy(breaker=Breaker(max_pool_share=0.1, min_nodes=1))  # one node of this pool at a time
    executor = make_executor(policy)
    lane = CordonLane(engine, executor)
    a = open_incident(engine, first, ["Xid 79"], "gpu_lost", "hardware")
    b = open_incident(engine, second, ["Xid 79"], "gpu_lost", "hardware")
    fault(engine, a, T0, 79)
    fault(engine, b, T0, 79)

    assert offer(lane, a).outcome == "done"
    tripped = offer(lane, b)
    assert (tripped.decision, tripped.outcome) == ("trip_breaker", "blocked")
    assert [(p.incident_id, p.kind) for p in lane.pending.all()] == [(b, "breaker")]
    assert asyncio.run(lane.tick()) == []  # still tripped: held
    assert not admin_core.read_node(second).spec.unschedulable

    # The operator returns the first node to service and resets the breaker (`xidpipe node release`,
    # `xidpipe breaker reset`): the held cordon is offered again and lands.
    executor.release(first, by="oncall", reason="GPU replaced")
    executor.reset_breaker(by="oncall", reason="rack power fixed")
    [reoffered] = asyncio.run(lane.tick())
    assert (reoffered.incident_id, reoffered.result.outcome) == (b, "done")
    assert admin_core.read_node(second).spec.unschedulable
    assert lane.pending.all() == []


def test_the_drain_evicts_the_incidents_pods(
    engine: sa.Engine, admin_core: client.CoreV1Api, make_node: NodeFactory, make_executor: ExecutorFactory,
    make_pod: PodFactory, namespace: str,
) -> None:
    node = make_node(pool=unique("pool"))
    listed, joined, bystander = (make_pod(node, running=True) for _ in range(3))
    executor = make_executor(CordonPolicy(drain=Drain(enabled=True, deadline_s=10)))
    lane = CordonLane(engine, executor)
    inc = open_incident(engine, node, ["Xid 79"], "gpu_lost", "hardware",
                        pods=[f"{namespace}/{listed.metadata.name}/main"])
    fault(engine, inc, T0, 79, pod=(namespace, joined.metadata.name))

    result = offer(lane, inc)
    drained = result.step("evict")
    assert result.outcome == "done" and drained is not None
    assert sorted(drained.details["evicted"]) == sorted(f"{namespace}/{p.metadata.name}" for p in (listed, joined))
    names = {p.metadata.name for p in admin_core.list_namespaced_pod(namespace).items
             if p.metadata.deletion_timestamp is None}
    assert bystander.metadata.name in names
