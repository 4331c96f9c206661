"""500 simultaneous faults on 500 nodes of one pool: every node is cordoned (the breaker allows it
here) and gets its remediation loop, and the remediations in flight never pass the caps: the pool's
share (2 %: 10 nodes) below the cluster's cap (20). A loop that ends frees its slot for a queued one.
PostgreSQL holds the history (the cap is counted and taken under its advisory lock)."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.migrate import upgrade
from history.tables import FaultEvent, Incident
from tests.kube import unique
from tests.respond.remediation.conftest import policy

FAULTS = 500
POOL_SHARE = 0.02  # of 500 nodes: 10 in flight at most in the pool
FINAL = {"returned", "rma", "manual", "cancelled", "dry_run"}


def create_nodes(core: client.CoreV1Api, names: list[str], pool: str) -> None:
    def one(name: str) -> None:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
            name=name, labels={"xidpipe.io/pool": pool, "nvidia.com/gpu.present": "true"})))

    with ThreadPoolExecutor(8) as pool_exec:
        list(pool_exec.map(one, names))


def delete_nodes(core: client.CoreV1Api, names: list[str]) -> None:
    def one(name: str) -> None:
        try:
            core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    with ThreadPoolExecutor(8) as pool_exec:
        list(pool_exec.map(one, names))


def seed_faults(engine: sa.Engine, nodes: list[str]) -> list[str]:
    """One Xid 79 incident per node, as the stream writes them (no evidence yet: admitted loops wait there)."""
    at = datetime.now(UTC) - timedelta(seconds=30)
    ids = []
    with Session(engine) as s:
        for node in nodes:
            incident_id, gpu = f"v2:{uuid.uuid4().hex[:12]}@{node}", f"GPU-{uuid.uuid4()}"
            s.add(Incident(incident_id=incident_id, fingerprint=f"v2:{node}", node=node, gpu=gpu, family="gpu_lost",
                           status="open", category="hardware", reason="test", count=1, first_seen=at, last_seen=at,
                           opened_at=at, updated_at=at, resolved_at=None, previous_incident_id=None, gpu_uuid=gpu,
                           serial=None, pci="0000:18:00.0", codes=["Xid 79"], pods=[], processes=[], workloads=[],
                           immediate_action=None, investigatory_action=None, description=None, cordon_requested=True,
                           version=1))
            s.add(FaultEvent(node=node, content_hash=uuid.uuid4().hex, record_id=uuid.uuid4().hex, sources="kernel",
                             occurred_at=at, ingested_at=at, kind="xid", family="gpu_lost", code="Xid 79", xid=79,
                             gpu=gpu, message="Xid 79", raw="r", attribution={}, incident_id=incident_id, counted=True))
            ids.append(incident_id)
        s.commit()
    return ids


def stages(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT stage, count(*) FROM remediation_loops GROUP BY stage")).all()
    return {str(stage): int(n) for stage, n in rows}


def in_flight(counts: dict[str, int]) -> int:
    return sum(n for stage, n in counts.items() if stage not in FINAL and stage != "queued")


def test_500_simultaneous_faults_respect_the_caps(make_loops: Any, cluster_core: client.CoreV1Api,
                                                 postgres_database: str) -> None:
    engine = make_engine(postgres_database)
    upgrade(engine)
    pool = unique("cap")
    nodes = [f"{pool}-{i:03d}" for i in range(FAULTS)]
    create_nodes(cluster_core, nodes, pool)
    try:
        pol = policy(budgets={"max_in_flight": 20, "max_pool_share": POOL_SHARE}, evidence={"wait_s": 3600})
        loops = make_loops(pol, engine=engine)
        incidents = seed_faults(engine, nodes)

        async def offer_all() -> None:
            gate = asyncio.Semaphore(10)

            async def one(incident_id: str) -> None:
                async with gate:
                    await loops.lane.offer(incident_id)

            await asyncio.gather(*(one(i) for i in incidents))

        asyncio.run(offer_all())
        assert stages(engine) == {"queued": FAULTS}  # every fault cordoned, every node's loop opened
        cordoned = sum(1 for n in cluster_core.list_node(label_selector=f"xidpipe.io/pool={pool}").items
                       if n.spec.unschedulable)
        assert cordoned == FAULTS

        most = 0
        for _ in range(3):
            loops.remediator.tick()
            counts = stages(engine)
            most = max(most, in_flight(counts))
            assert in_flight(counts) <= 10, counts
        assert most == 10  # the cap is reached, not undershot
        assert any("its share (2%) allows 10" in lp.reason for lp in loops.store.loops(limit=FAULTS)
                   if lp.stage == "queued")

        # Three admitted loops end (their nodes uncordoned by an operator): three queued ones take the slots.
        admitted = [lp for lp in loops.store.loops(limit=FAULTS) if lp.stage == "evidence"]
        for lp in admitted[:3]:
            cluster_core.patch_node(lp.node, {"spec": {"unschedulable": False}})
        for _ in range(2):
            loops.remediator.tick()
            counts = stages(engine)
            assert in_flight(counts) <= 10, counts
        assert counts.get("cancelled") == 3 and in_flight(counts) == 10 and counts["queued"] == FAULTS - 13
    finally:
        delete_nodes(cluster_core, nodes)
        engine.dispose()
