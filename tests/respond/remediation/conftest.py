"""The remediation loop on the test cluster with controllers (tests/cluster.py): kube-scheduler and
kube-controller-manager run the loop's Jobs on KWOK's nodes, the Eviction API honours budgets, and
the responder acts as the worker identity the chart's RBAC binds.

`Hosts` plays the machines behind the KWOK nodes: a node whose reboot Job appears reboots (a new
boot ID through KWOK's node-reboot stage), as the Job's `systemctl reboot` would make it. KWOK plays
each Job's container by its pod's annotations (`jobs.<kind>.pod_annotations` of the policy): its
outcome and its termination message (the validation's DCGM output, the bug report's summary).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.migrate import upgrade
from history.remediation_store import LoopRow, RemediationStore
from history.tables import EvidenceRecord, FaultEvent, Incident
from models.cordon_policy import CordonPolicy
from models.remediation_jobs import LABEL_KIND, encode_termination
from respond.cordon.action_log import SqlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon_lane import CordonLane
from respond.remediation.intake import Intake
from respond.remediation.kube_jobs import KubeRemediation
from respond.remediation.loop import Remediator
from tests.cluster import reboot_node, testcluster

NS = "xidpipe-agent"  # the chart's default namespace of the remediation Jobs (the agent's)
FIXTURES = Path(__file__).resolve().parents[2] / "models" / "fixtures" / "dcgm_diag"
OUTCOME, MESSAGE = testcluster.OUTCOME_ANNOTATION, testcluster.TERMINATION_MESSAGE_ANNOTATION
DCGM_PASS = encode_termination((FIXTURES / "dcgm-3.1.0-pass.txt").read_text())
DCGM_FAIL = encode_termination((FIXTURES / "nvvs-1.7-per-gpu-sm-stress-fail.json").read_text())
T0 = datetime.now(UTC) - timedelta(minutes=5)


def policy(**remediation: Any) -> CordonPolicy:
    """Remediation on and acting (not a dry run), short deadlines, a breaker that lets tests' cordons
    through; KWOK plays each Job (validation passes unless told otherwise)."""
    rem: dict[str, Any] = {
        "enabled": True, "dry_run": False, "deadline_s": 600,
        "evidence": {"wait_s": 120},
        "drain": {"deadline_s": 30},
        "execution": {"reset_deadline_s": 60, "reboot_deadline_s": 90},
        "validation": {"deadline_s": 90},
        "jobs": {"validation": {"image": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
                                "command": ["/bin/sh", "-c", "dcgmi diag -r {level} -j"], "runtime_class": "nvidia",
                                "pod_annotations": {OUTCOME: "Succeeded", MESSAGE: DCGM_PASS}}},
    }
    for key, value in remediation.items():
        if isinstance(value, dict) and isinstance(rem.get(key), dict):
            rem[key] = {**rem[key], **value}
        else:
            rem[key] = value
    return CordonPolicy.model_validate({"breaker": {"max_pool_share": 1.0, "max_per_hour": 1000},
                                       "remediation": rem})


def job_template(image: str = "docker.io/library/busybox:1.37.0", **annotations: str) -> dict[str, Any]:
    return {"image": image, "command": ["/bin/sh", "-c", "true"], "pod_annotations": annotations}


@pytest.fixture(scope="session")
def remediation_cluster(cluster: Any, cluster_admin_client: client.ApiClient,
                        cluster_worker_client: client.ApiClient) -> client.ApiClient:
    """The cluster with the chart's RBAC (its remediation namespace, Role and ServiceAccount among it)
    and NVIDIA's RuntimeClass; the worker's client."""
    try:
        client.NodeV1Api(cluster_admin_client).create_runtime_class(
            client.V1RuntimeClass(metadata=client.V1ObjectMeta(name="nvidia"), handler="nvidia"))
    except ApiException as exc:
        if exc.status != 409:
            raise
    return cluster_worker_client


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    e = make_engine(f"sqlite:///{tmp_path / 'history.db'}")
    upgrade(e)
    yield e
    e.dispose()


class Hosts:
    """The machines behind KWOK's nodes: each reboots when its reboot Job appears (once per Job),
    unless it is switched off; what ran on the node at that moment is kept."""

    def __init__(self, admin: client.ApiClient) -> None:
        self.core = client.CoreV1Api(admin)
        self.batch = client.BatchV1Api(admin)
        self.off: set[str] = set()
        self.rebooted: dict[str, list[str]] = {}  # Job name -> the node's other pods when it rebooted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hosts", daemon=True)

    def start(self) -> Hosts:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        started = datetime.now(UTC) - timedelta(seconds=1)
        while not self._stop.wait(0.3):
            try:
                jobs = self.batch.list_namespaced_job(NS, label_selector=f"{LABEL_KIND}=reboot").items
            except ApiException:
                continue
            for job in jobs:
                node = (job.metadata.annotations or {}).get("xidpipe.io/node", "")
                if job.metadata.name in self.rebooted or node in self.off or job.metadata.creation_timestamp < started:
                    continue  # another test's Job, kept for its TTL
                try:
                    others = [f"{p.metadata.namespace}/{p.metadata.name}" for p in
                              self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
                              if p.metadata.namespace != NS]
                    self.rebooted[job.metadata.name] = others
                    reboot_node(self.core, node, timeout_s=90)
                except ApiException:
                    continue


@pytest.fixture
def hosts(cluster_admin_client: client.ApiClient) -> Iterator[Hosts]:
    h = Hosts(cluster_admin_client).start()
    yield h
    h.stop()


@dataclass
class Loops:
    """A responder's cordon lane and remediator on the test cluster, with the history in `engine`."""

    engine: sa.Engine
    executor: CordonExecutor
    remediator: Remediator
    lane: CordonLane
    store: RemediationStore
    jobs_seen: set[str] = field(default_factory=set)

    def offer(self, incident_id: str) -> LoopRow:
        asyncio.run(self.lane.offer(incident_id))
        found = self.store.loops(incident_id=incident_id)
        assert found, f"no remediation loop for {incident_id}: {self.executor.store.recent(5)}"
        return found[0]

    def drive(self, loop_id: str, until: Callable[[LoopRow], bool], what: str, timeout_s: float = 180.0) -> LoopRow:
        deadline = time.monotonic() + timeout_s
        while True:
            self.remediator.tick()
            loop = self.store.get(loop_id)
            assert loop is not None
            if until(loop):
                return loop
            if time.monotonic() > deadline:
                steps = [f"{t.from_stage}->{t.to_stage}: {t.reason}" for t in self.store.transitions(loop_id)]
                pytest.fail(f"timed out waiting for {what}; loop {loop.stage}: {loop.reason}; {steps}")
            time.sleep(0.3)


@pytest.fixture
def make_loops(remediation_cluster: client.ApiClient, engine: sa.Engine) -> Iterator[Callable[..., Loops]]:
    made: list[KubeRemediation] = []

    def factory(pol: CordonPolicy, engine: sa.Engine = engine, **kw: Any) -> Loops:
        nodes = KubeRemediation(remediation_cluster, namespace=NS, reporting_instance="xidpipe-test")
        made.append(nodes)
        store = RemediationStore(engine)
        executor = CordonExecutor(pol, SqlActionStore(engine), nodes, ports=[Intake(store, pol)])
        return Loops(engine, executor, Remediator(store, nodes, executor, **kw), CordonLane(engine, executor), store)

    yield factory
    for nodes in made:
        nodes.close()


def seed_incident(engine: sa.Engine, node: str, *, xid: int = 79, family: str = "gpu_lost", category: str = "hardware",
                  serial: str = "1652320031234", gpu_uuid: str | None = None, pods: list[str] | None = None,
                  evidence: bool = True, previous: str | None = None, at: datetime | None = None) -> str:
    """An incident of one GPU fault as the stream writes it: the incident, its fault event and (unless
    `evidence` is False) the agent's capture of it."""
    at = at or datetime.now(UTC) - timedelta(seconds=30)
    incident_id = f"v2:{uuid.uuid4().hex[:12]}@{node}"
    gpu_uuid = gpu_uuid or f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, node)}"
    record = uuid.uuid4().hex
    with Session(engine) as s:
        s.add(Incident(
            incident_id=incident_id, fingerprint=f"v2:{node}", node=node, gpu=gpu_uuid, family=family,
            status="open", category=category, reason="test", count=1, first_seen=at, last_seen=at, opened_at=at,
            updated_at=at, resolved_at=None, previous_incident_id=previous, gpu_uuid=gpu_uuid, serial=serial,
            pci="0000:18:00.0", codes=[f"Xid {xid}"], pods=pods or [], processes=[], workloads=[],
            immediate_action=None, investigatory_action=None, description=None, cordon_requested=True, version=1,
        ))
        event = FaultEvent(node=node, content_hash=uuid.uuid4().hex, record_id=record, sources="kernel",
                           occurred_at=at, ingested_at=at, kind="xid", family=family, code=f"Xid {xid}", xid=xid,
                           gpu=gpu_uuid, gpu_uuid=gpu_uuid, serial=serial, pci="0000:18:00.0", message=f"Xid {xid}",
                           raw="r", attribution={}, incident_id=incident_id, counted=True)
        s.add(event)
        s.flush()
        if evidence:
            add_evidence(s, node, record, event.id, at)
        s.commit()
    return incident_id


def add_evidence(s: Session, node: str, record: str, event_id: int | None, at: datetime) -> None:
    s.add(EvidenceRecord(node=node, record_id=f"ev-{record}", trigger_record_id=record, fault_event_id=event_id,
                         gpu_uuid=None, pci=None, xid=None, pid=None, captured_at=at,
                         manifest=[{"name": "nvidia-smi -q", "status": "ok"}], items=[]))


def jobs_on(batch: client.BatchV1Api, loop: str) -> dict[str, str]:
    """The loop's Jobs still in the cluster: name -> kind."""
    found = batch.list_namespaced_job(NS, label_selector=f"xidpipe.io/remediation-loop={loop}").items
    return {j.metadata.name: j.metadata.labels[LABEL_KIND] for j in found}
