"""Fencing on the real kube-apiserver: the node adapter asks the Lease election right before every
write it sends (`KubeNodes._write`, `LeaderElector.check_write`). A leader whose Lease was taken over
(another holder written into the Lease, as a standby does once the Lease expired) sends no further
write: the executor records the refusal as `fenced`, and a takeover in the middle of a plan leaves
no write of the old leader after the takeover (etcd's revisions order every write of the cluster).

The Lease is admin's (a Lease of the test's own); the node writes act as the worker's identity under
the chart's RBAC and node policy.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from models.cordon import ANN_INCIDENT, CordonDecision, PodRef
from models.cordon_policy import CordonPolicy, Drain
from models.leader_election import LeaseTimings, claimed
from models.quarantine import DeviceRef
from models.vocabulary import CordonOutcome
from respond.cordon.kube_nodes import KubeNodes, event_name
from respond.cordon.port import NodeRead, ReleaseWriter
from respond.cordon.retry import Backoff
from respond.cordon.steps import STEPS
from respond.cordon.steps.drain import PodInfo
from respond.cordon.steps.remediate import RemediationIntake
from respond.errors import Fenced
from respond.leader import LeaderElector
from respond.lease_kube import KubeLease
from respond.quarantine.kube_cluster import KubeCluster
from tests.kube import PodFactory, unique
from tests.respond.cordon.conftest import ExecutorFactory, NodeFactory, xid79

TIMINGS = LeaseTimings(lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)


class Clock:
    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def leader(admin_client: client.ApiClient) -> LeaderElector:
    """responder-a, holding a Lease of its own."""
    elector = LeaderElector(KubeLease(admin_client, unique("lease"), "default"), "responder-a", TIMINGS)
    assert elector.try_acquire_or_renew()
    return elector


def take_over(elector: LeaderElector, holder: str = "responder-b") -> int:
    """Write another holder into the elector's Lease, as a standby does when it takes over; the
    Lease's resourceVersion after the takeover."""
    current = elector.lease.get()
    assert current is not None
    taken = elector.lease.update(current.resource_version, claimed(current.record, holder, datetime.now(UTC),
                                                                   TIMINGS))
    return int(taken.resource_version)


def fenced_nodes(worker_client: client.ApiClient, elector: LeaderElector) -> KubeCluster:
    """The responder's adapter of every port (the nodes' and the GPUs' DeviceTaintRules), fenced by `elector`."""
    return KubeCluster(worker_client, reporting_instance="responder-a", backoff=Backoff(deadline_s=5.0),
                       fence=elector, write_timeout_s=4.0)


def records(action_log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in action_log.read_text().splitlines()]


def events_about(admin_client: client.ApiClient, node: str) -> list[Any]:
    listed = client.EventsV1Api(admin_client).list_namespaced_event("default")
    return [e for e in listed.items if e.regarding and e.regarding.name == node]


def test_the_lease_check_allows_its_own_renewals_and_refuses_a_takeover_or_a_passed_deadline(
    admin_client: client.ApiClient,
) -> None:
    clock = Clock()
    elector = LeaderElector(KubeLease(admin_client, unique("lease"), "default"), "responder-a", TIMINGS,
                            clock=clock)
    assert not elector.check_write().allowed  # not the leader yet: nothing read
    assert elector.try_acquire_or_renew()
    assert elector.check_write().allowed
    clock.now += 9.9
    assert elector.try_acquire_or_renew()  # its own renewal moves the version: still its Lease
    clock.now += 9.9
    assert elector.check_write().allowed
    clock.now += 0.1  # 10 s since the last renewal started: the deadline, though the Lease names it
    verdict = elector.check_write()
    assert not verdict.allowed and "renew deadline" in verdict.reason
    assert elector.try_acquire_or_renew() and elector.check_write().allowed
    take_over(elector)
    verdict = elector.check_write()
    assert not verdict.allowed and "held by responder-b" in verdict.reason


def test_a_renewal_in_flight_never_fences_its_own_writes(leader: LeaderElector) -> None:
    """Checks while the leader renews as fast as it can: each check reads the Lease while a renewal
    may be moving its version; none may take the leader's own renewal for another writer."""
    stop = threading.Event()
    renewals = 0

    def renew() -> None:
        nonlocal renewals
        while not stop.is_set():
            assert leader.try_acquire_or_renew()
            renewals += 1

    renewer = threading.Thread(target=renew)
    renewer.start()
    try:
        verdicts = [leader.check_write() for _ in range(150)]
    finally:
        stop.set()
        renewer.join(30)
    assert renewals > 10
    refused = [v.reason for v in verdicts if not v.allowed]
    assert refused == []


def test_a_leader_whose_lease_was_taken_over_refuses_its_next_write_and_records_it_fenced(
    worker_client: client.ApiClient, admin_core: client.CoreV1Api, leader: LeaderElector, make_node: NodeFactory,
    make_executor: ExecutorFactory, action_log: Path,
) -> None:
    first, second = make_node(pool=unique("pool")), make_node(pool=unique("pool"))
    executor = make_executor(nodes=fenced_nodes(worker_client, leader))
    assert executor.handle(xid79(first)).outcome == "done"  # the leader writes
    take_over(leader)

    result = executor.handle(xid79(second))
    assert result.outcome == "fenced" and result.retryable and result.changes == []
    assert "not sent" in result.reason and "held by responder-b" in result.reason
    node = admin_core.read_node(second)
    assert not node.spec.unschedulable and ANN_INCIDENT not in (node.metadata.annotations or {})
    recorded = [r for r in records(action_log) if r["node"] == second]
    assert [(r["action"], r["outcome"]) for r in recorded] == [("cordon", "fenced")]

    released = executor.release(first, by="alice", reason="replaced the GPU")
    assert released.outcome == "fenced" and admin_core.read_node(first).spec.unschedulable


def test_every_write_of_the_node_adapter_is_fenced(
    worker_client: client.ApiClient, admin_client: client.ApiClient, admin_core: client.CoreV1Api,
    leader: LeaderElector, make_node: NodeFactory, make_pod: PodFactory, make_executor: ExecutorFactory,
) -> None:
    """Each write a step or the release makes, sent by the adapter once the Lease was taken over: each
    refused before it was sent, and nothing in the cluster changed."""
    node = make_node(pool=unique("pool"))
    pod = make_pod(node, running=True)
    nodes = fenced_nodes(worker_client, leader)
    make_executor(nodes=nodes).handle(xid79(node, incident="inc-held"))  # cordoned while it led
    before = nodes.read(node)
    take_over(leader)

    req = xid79(node, incident="inc-held", count=2)
    at = datetime.now(UTC)
    info = PodInfo(namespace=pod.metadata.namespace, name=pod.metadata.name, node_name=node)
    writes = {  # by the port method that sends it
        "apply_cordon": lambda: nodes.apply_cordon(
            NodeRead(before.view.model_copy(update={"unschedulable": False}), before.resource_version, []), req,
            CordonDecision(outcome=CordonOutcome.CORDON, reason="test"), at),
        "annotate": lambda: nodes.annotate(node, {"xidpipe.io/occurrences": "2"}),
        "set_condition": lambda: nodes.set_condition(node, "False", "GpuLost", "again", at, None),
        "emit_event": lambda: nodes.emit_event(node, key="inc-other", kind="cordon", action="Cordon",
                                               reason="GpuLost", note="n", at=at),
        "event_series": lambda: nodes.event_series(node, req, at, "again"),
        "apply_release": lambda: nodes.apply_release(before, by="alice", reason="r", at=at),
        "evict": lambda: nodes.evict(info, 0),
        "apply_quarantine": lambda: nodes.apply_quarantine(req, CordonDecision(
            outcome=CordonOutcome.QUARANTINE, reason="test", scope="gpu", gpu="GPU-fenced",
            device=DeviceRef(driver="gpu.nvidia.com", pool=node, device="gpu-0"), effect="NoSchedule",
            rule_name=unique("xidpipe-gpu-fenced")), at),
    }
    # Every method of the steps' ports and of the release's is tried here, but the pod reads: a step
    # that adds a write to a port adds it to this table.
    # The remediation step's port opens the loop's record in the database, not the cluster: the loop's
    # own cluster writes (Jobs, its condition) go through this adapter's fenced write path.
    ports = {step.port for step in STEPS if step.port is not RemediationIntake} | {ReleaseWriter}
    methods = {m for port in ports for m in vars(port) if not m.startswith("_") and callable(getattr(port, m))}
    assert methods - {"read_pod", "node_pods", "node_quarantine"} == set(writes)
    for what, write in writes.items():
        with pytest.raises(Fenced, match="held by responder-b"):
            write()
        assert nodes.read(node).resource_version == before.resource_version, f"{what} changed the node"
    assert [e.metadata.name for e in events_about(admin_client, node)] == [event_name(node, "inc-held")]
    assert not [r for r in client.ResourceV1Api(admin_client).list_device_taint_rule().items
                if r.metadata.name.startswith("xidpipe-gpu-fenced")]  # no rule was created
    assert admin_core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace).metadata.deletion_timestamp \
        is None


class TakeoverAfterCordon(KubeNodes):
    """The adapter of the leader under test: right after its cordon lands, another replica takes the
    Lease over (the takeover's resourceVersion is kept), before the plan's next step."""

    def __init__(self, *args: Any, elector: LeaderElector, **kwargs: Any) -> None:
        super().__init__(*args, fence=elector, **kwargs)
        self.elector = elector
        self.takeover_version = 0

    def apply_cordon(self, current: NodeRead, *args: Any) -> tuple[list[str], NodeRead]:
        done = super().apply_cordon(current, *args)
        self.takeover_version = take_over(self.elector)
        return done


def test_a_takeover_mid_plan_leaves_no_write_of_the_old_leader_after_it(
    worker_client: client.ApiClient, admin_client: client.ApiClient, admin_core: client.CoreV1Api,
    leader: LeaderElector, make_node: NodeFactory, make_pod: PodFactory, make_executor: ExecutorFactory,
    action_log: Path,
) -> None:
    node = make_node(pool=unique("pool"))
    pod = make_pod(node, running=True)
    nodes = TakeoverAfterCordon(worker_client, reporting_instance="responder-a", backoff=Backoff(deadline_s=5.0),
                                elector=leader, write_timeout_s=4.0)
    policy = CordonPolicy(drain=Drain(enabled=True, deadline_s=2, grace_period_s=0))
    pods = (PodRef(namespace=pod.metadata.namespace, name=pod.metadata.name),)

    result = make_executor(policy, nodes=nodes).handle(xid79(node, pods=pods))

    # The cordon landed before the takeover; the condition, the Event and the eviction after it were refused.
    assert nodes.takeover_version
    assert result.outcome == "fenced" and result.retryable
    assert result.changes == ["unschedulable", "taint", "annotations"]
    written = admin_core.read_node(node)
    assert written.spec.unschedulable
    assert int(written.metadata.resource_version) < nodes.takeover_version
    assert not [c for c in written.status.conditions or [] if c.type == "GPUHealthy"]
    assert events_about(admin_client, node) == []
    assert admin_core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace).metadata.deletion_timestamp \
        is None
    assert [(r["action"], r["outcome"]) for r in records(action_log)] == [("cordon", "done"), ("cordon", "fenced")]

