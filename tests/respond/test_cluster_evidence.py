"""Cluster-side dossier evidence read as the worker's RBAC identity from the real kube-apiserver."""

from __future__ import annotations

from kubernetes import client

from respond.cluster_evidence import capture
from tests.kube import unique

SECRET = "s3cr3t-value-7781"


def test_node_pod_events_and_log_as_the_worker(
    admin_core: client.CoreV1Api, worker_client: client.ApiClient, node: client.V1Node, namespace: str
) -> None:
    name = unique("llm-pretrain")
    admin_core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, labels={"app": "pretrain", "app.kubernetes.io/part-of": "llm-platform", "team": "llm-research"},
            owner_references=[client.V1OwnerReference(api_version="batch/v1", kind="Job", name="llm-pretrain-7",
                                                      uid="0b6a7c4e-1f2d-4c3b-9a8e-7d6c5b4a3f21", controller=True)]),
        spec=client.V1PodSpec(node_name=node.metadata.name, automount_service_account_token=False, containers=[
            client.V1Container(name="trainer", image="nvcr.io/nvidia/pytorch:24.10-py3",
                               env=[client.V1EnvVar(name="WANDB_API_KEY", value=SECRET)],
                               resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"}))]),
    ))
    admin_core.create_namespaced_event(namespace, client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=unique("ev")),
        involved_object=client.V1ObjectReference(kind="Pod", name=name, namespace=namespace),
        reason="BackOff", message="Back-off restarting failed container trainer", type="Warning", count=3))

    items, owner = capture(worker_client, node.metadata.name, namespace, name, "trainer")

    by_name = {i.name: i for i in items}
    assert owner == "llm-research"  # the first of the owner keys that is set: `team` before `part-of`
    assert by_name["node description"].status == "ok"
    assert "example.com/other-owner=:NoSchedule" in by_name["node description"].content
    pod = by_name["pod description"]
    assert pod.status == "ok" and "Owner: Job/llm-pretrain-7" in pod.content and "GPU limit 1" in pod.content
    assert "Team: llm-research" in pod.content
    _, by_part_of = capture(worker_client, node.metadata.name, namespace, name, "trainer",
                            ("app.kubernetes.io/part-of",))
    assert by_part_of == "llm-platform"
    assert "env (names only): WANDB_API_KEY" in pod.content
    assert "Warning BackOff x3: Back-off restarting failed container trainer" in by_name["pod events"].content
    # No kubelet runs here: the log cannot be read, and the capture says so instead of failing.
    log = by_name["container log (last lines)"]
    assert log.status == "error" and name in log.content
    assert all(SECRET not in i.content for i in items)


def test_a_missing_pod_is_reported_not_raised(worker_client: client.ApiClient, node: client.V1Node) -> None:
    items, owner = capture(worker_client, node.metadata.name, "nowhere", "gone-pod", None)
    assert owner is None
    assert [i.status for i in items] == ["ok", "error", "ok", "error"]
    assert "HTTP 404" in items[1].content


def test_no_rights_no_evidence_but_no_failure(nobody_client: client.ApiClient, node: client.V1Node) -> None:
    items, _ = capture(nobody_client, node.metadata.name, None, None, None)
    assert [(i.name, i.status) for i in items] == [("node description", "error")]
    assert "HTTP 403" in items[0].content


def test_the_responders_dossier_carries_the_cluster_evidence_and_owner(
    admin_core: client.CoreV1Api, worker_client: client.ApiClient, node: client.V1Node, namespace: str,
    tmp_path: object,
) -> None:
    from datetime import UTC, datetime, timedelta
    from pathlib import Path

    from sqlalchemy.orm import Session

    from history.engine import make_engine
    from history.tables import Base, FaultEvent, Incident
    from respond.responder import Responder

    pod = unique("bert")
    admin_core.patch_namespace(namespace, {"metadata": {"annotations": {"xidpipe.io/slack-channel": "#team-nlp"}}})
    admin_core.create_namespaced_pod(namespace, client.V1Pod(
        metadata=client.V1ObjectMeta(name=pod, annotations={"owner": "nlp-team"},
                                     owner_references=[client.V1OwnerReference(
            api_version="apps/v1", kind="ReplicaSet", name="bert-7d9f", uid="5b1e3c2a-0000-4000-8000-000000000001",
            controller=True)]),
        spec=client.V1PodSpec(node_name=node.metadata.name, automount_service_account_token=False,
                              containers=[client.V1Container(name="finetune", image="bert:1")])))
    engine = make_engine(f"sqlite:///{Path(str(tmp_path)) / 'r.db'}")
    Base.metadata.create_all(engine)
    t = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    with Session(engine) as s:
        s.add(Incident(incident_id="inc-1", fingerprint="v1:1", node=node.metadata.name, gpu="0000:b7:00.0",
                       family="application", status="open", category="suspected_hardware", reason="r", count=1,
                       first_seen=t, last_seen=t, opened_at=t, updated_at=t, codes=["Xid 13"], pods=[],
                       processes=[], workloads=[]))
        s.add(FaultEvent(node=node.metadata.name, content_hash="h1", record_id="k1", sources="kernel",
                         occurred_at=t, ingested_at=t, kind="xid", family="application", code="Xid 13", xid=13,
                         gpu="0000:b7:00.0", pod=pod, namespace=namespace, container="finetune", process="python3",
                         pid=7, message="m", raw="r", attribution={}, incident_id="inc-1"))
        # an earlier fault of the incident hit a job of another team: its namespace is read for its channel too
        s.add(FaultEvent(node=node.metadata.name, content_hash="h0", record_id="k0", sources="kernel",
                         occurred_at=t - timedelta(minutes=5), ingested_at=t, kind="xid",
                         family="application", code="Xid 13", xid=13, gpu="0000:b7:00.0", pod="other-1",
                         namespace="default", container="c", process="p", pid=8, message="m", raw="r",
                         attribution={}, incident_id="inc-1"))
        s.commit()

    class NoActions:
        class store:
            @staticmethod
            def recent(limit: int) -> list[object]:
                return []

    responder = Responder(engine, NoActions(), sinks=None, cluster_api=worker_client)  # type: ignore[arg-type]
    notice = responder._notice("inc-1")
    assert notice is not None
    d = notice.dossier
    assert d.attribution.owner == "nlp-team" and d.attribution.pod == pod  # from the pod's `owner` annotation
    # the team's chat channel, from its namespace, reaches the routing
    assert notice.namespace_meta.get("xidpipe.io/slack-channel") == "#team-nlp"
    assert [(a.namespace, a.pod) for a in d.affected] == [("default", "other-1"), (namespace, pod)]
    assert notice.namespaces[namespace].get("xidpipe.io/slack-channel") == "#team-nlp"
    assert notice.namespaces["default"].get("kubernetes.io/metadata.name") == "default"
    assert {e.name for e in d.evidence if e.source == "cluster"} == {
        "node description", "pod description", "pod events", "container log (last lines)"}


def test_a_fleet_incident_asks_the_cluster_for_no_node(worker_client: client.ApiClient, tmp_path: object) -> None:
    """A fleet incident's `node` is the cluster's name: there is no such node to describe."""
    from datetime import UTC, datetime
    from pathlib import Path

    from sqlalchemy.orm import Session

    from history.engine import make_engine
    from history.migrate import upgrade
    from history.tables import Incident
    from respond.responder import Responder

    engine = make_engine(f"sqlite:///{Path(str(tmp_path)) / 'f.db'}")
    upgrade(engine)
    t = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    with Session(engine) as s:
        s.add(Incident(incident_id="fleet-1", fingerprint="v2:f", node="prod-east", gpu="fleet", family="gpu_lost",
                       status="open", category="fleet", reason="gpu_lost on 3 nodes", count=3, first_seen=t,
                       last_seen=t, opened_at=t, updated_at=t, codes=["Xid 79"], pods=[], processes=[],
                       workloads=[], component="fleet", component_id="gpu_lost",
                       nodes=["rack-1", "rack-2", "rack-3"]))
        s.commit()

    class NoActions:
        class store:
            @staticmethod
            def recent(limit: int) -> list[object]:
                return []

    responder = Responder(engine, NoActions(), sinks=None, cluster_api=worker_client)  # type: ignore[arg-type]
    notice = responder._notice("fleet-1")
    assert notice is not None and notice.dossier.component == "fleet"
    assert not [e for e in notice.dossier.evidence if e.source == "cluster"]
