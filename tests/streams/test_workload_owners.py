"""A job torn down on 40 nodes is one workload incident and one chat message: each node's pod held a
GPU (PodResources), its workload came from the API server (the workloads sensor's `pod_workloads`
record), and its process hit an application Xid, every node in a batch of its own, through the
store (SQLite and PostgreSQL). A JobSet's, an Indexed Job's and a PyTorchJob's pod names keep an index
or a role, so the name heuristics (the last resort, for pods the API server no longer has) make 40,
40 and 2 workloads of them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import MAX_LISTED
from history.tables import GpuAssignment, Incident
from models.stream_policy import PipelinePolicy
from respond.dossier_builder import build_dossier
from respond.sinks.build import build_sinks
from respond.sinks.model import IncidentNotice
from respond.sinks.settings import SinkSettings
from streams.store import BatchResult, Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, items_of, pods, s, workloads

NS = "team-llm"
NODES = 40

# The pod each node ran, by the name its controller gave it, and the workload the API server says it is.
JOBS: dict[str, tuple[Callable[[int], str], tuple[str, str, str], str, int]] = {
    # kind: (pod name of node i, (kind, API group, name), its key, incidents the name heuristics make)
    "jobset": (lambda i: f"trainer-workers-{i // 8}-{i % 8}-{i:05x}"[:32],
               ("JobSet", "jobset.x-k8s.io", "trainer"), f"{NS}/JobSet/trainer", NODES),
    "indexed_job": (lambda i: f"job-{i}-x{i:04x}", ("Job", "batch", "job"), f"{NS}/Job/job", NODES),
    "pytorchjob": (lambda i: "resnet-master-0" if i == 0 else f"resnet-worker-{i - 1}",
                   ("PyTorchJob", "kubeflow.org", "resnet"), f"{NS}/PyTorchJob/resnet", 2),
}


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = f"sqlite:///{tmp_path / 'w.db'}" if request.param == "sqlite" else request.getfixturevalue(
        "postgres_database")
    st = Store(url, PipelinePolicy(), cluster="c1")
    st.create_schema()
    yield st
    st.dispose()


def teardown(store: Store, job: str, *, owners: bool) -> list[BatchResult]:
    """Each node: its GPUs, the pod on GPU 0 (and, with `owners`, the pod's workload), then Xid 43 from
    the pod's process as the job is torn down, a few hundred milliseconds apart across the nodes."""
    name, (kind, group, workload), _, _ = JOBS[job]
    results = []
    for i in range(NODES):
        node = f"gpu-{i:02d}"
        records: list[Any] = [inventory(node, T0), pods(node, T0, {0: (NS, name(i), "trainer")})]
        if owners:
            records.append(workloads(node, T0, {(NS, name(i)): (kind, group, workload)}))
        records.append(Kmsg(node).xid(0, 43, T0 + s(600 + i * 0.3), pid=4000 + i, name="python"))
        results.append(store.process(items_of(records)))
    return results


def deliver(store: Store, results: list[BatchResult], outbox: Path) -> None:
    """The batches' ticket and notification requests through the real sinks (file outboxes), each twice
    (delivery is at least once), as the responder builds them (without a cluster to ask)."""
    settings = SinkSettings(outbox_dir=outbox, group_wait_s=0, slack_channel_interval_s=0)
    sinks = build_sinks(settings, f"sqlite:///{outbox / 'sinks.db'}")
    from history.migrate import upgrade

    upgrade(sinks.store.engine)
    actions = [o.payload for r in results for o in r.outgoing if o.payload.get("kind") in ("ticket", "notification")]
    for _ in range(2):
        for a in actions:
            with Session(store.engine) as session:
                row = session.get(Incident, a["incident_id"])
                assert row is not None
                dossier = build_dossier(session, row, cluster="c1")
                labels = {"node": row.node, "family": row.family, "category": row.category}
                if dossier.attribution.namespace:
                    labels["namespace"] = dossier.attribution.namespace
                notice = IncidentNotice(dossier=dossier, labels=labels)
            (sinks.tickets if a["kind"] == "ticket" else sinks.chat).submit(notice)


def chat_messages(outbox: Path) -> list[dict[str, Any]]:
    """The messages posted to any channel (thread replies are not new messages)."""
    found = [json.loads(p.read_text()) for p in (outbox / "slack").glob("*/*.json")]
    return [m for m in found if m.get("thread_ts") is None]


@pytest.mark.parametrize("job", list(JOBS))
def test_a_job_torn_down_on_40_nodes_is_one_workload_incident(store: Store, job: str, tmp_path: Path) -> None:
    results = teardown(store, job, owners=True)

    incidents = store_reads.incidents(store)
    (incident,) = incidents
    assert (incident["component"], incident["component_id"]) == ("workload", JOBS[job][2])
    assert incident["category"] == "application" and incident["count"] == NODES
    assert len(incident["pods"]) == min(NODES, MAX_LISTED) and incident["workloads"] == [JOBS[job][2]]
    events = store_reads.fault_events(store)
    assert len(events) == NODES and {e["workload"] for e in events} == {JOBS[job][2]}
    owner = events[0]["attribution"]["workload_owner"]
    assert owner["source"] == "api" and owner["kind"] == JOBS[job][1][0]
    with Session(store.engine) as session:  # what ran where, for classification: the same workload
        ran = set(session.scalars(sa.select(GpuAssignment.workload)))
    assert ran == {JOBS[job][2]}

    deliver(store, results, tmp_path / "out")
    (message,) = chat_messages(tmp_path / "out")
    assert JOBS[job][2] in message["text"]


@pytest.mark.parametrize("job", list(JOBS))
def test_without_the_api_servers_word_the_names_decide(store: Store, job: str, tmp_path: Path) -> None:
    """The last resort, for pods no workload snapshot names: their names without generated suffixes
    (what every node's faults were before: 40 incidents and 40 messages for a JobSet)."""
    results = teardown(store, job, owners=False)

    incidents = store_reads.incidents(store)
    assert {i["component"] for i in incidents} == {"workload"} and len(incidents) == JOBS[job][3]
    owners = {e["attribution"]["workload_owner"]["source"] for e in store_reads.fault_events(store)}
    assert owners == {"pod_name"}
    deliver(store, results, tmp_path / "out")
    assert len(chat_messages(tmp_path / "out")) == JOBS[job][3]
