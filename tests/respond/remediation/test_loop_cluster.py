"""The closed loop after the cordon, end to end on real components: kube-apiserver, kube-scheduler,
kube-controller-manager (Jobs, evictions, budgets) and KWOK's fake kubelets, the responder's cordon
lane and remediator acting as the chart's worker identity, the history in SQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from kubernetes import client
from sqlalchemy.orm import Session

from history.ledger_store import apply_inventory
from history.tables import FaultEvent, GpuLedgerEvent, Incident
from models.cordon import ANN_CORDONED_AT
from models.ledger import GpuSighting
from models.remediation_jobs import CONDITION_TYPE
from respond.remediation.returns import Returned, on_return, remove_return_hook
from tests.cluster import kwok_pod, wait_for
from tests.kube import unique
from tests.respond.remediation.conftest import (
    DCGM_FAIL,
    MESSAGE,
    OUTCOME,
    Hosts,
    add_evidence,
    job_template,
    jobs_on,
    policy,
    seed_incident,
)


def condition(core: client.CoreV1Api, node: str, kind: str) -> client.V1NodeCondition | None:
    return next((c for c in core.read_node(node).status.conditions or [] if c.type == kind), None)


def test_xid_79_is_drained_rebooted_once_validated_and_returned_then_rma_on_the_third_fault(
        make_loops, kwok_node, hosts: Hosts, cluster_core: client.CoreV1Api, cluster_admin_client: client.ApiClient,
        cluster_namespace: str, request: pytest.FixtureRequest) -> None:
    loops = make_loops(policy())
    node = kwok_node().metadata.name
    boot = cluster_core.read_node(node).status.node_info.boot_id
    batch = client.BatchV1Api(cluster_admin_client)
    trainer = cluster_core.create_namespaced_pod(cluster_namespace, kwok_pod(unique("trainer"), gpus=8, node_name=node))
    wait_for(lambda: cluster_core.read_namespaced_pod(trainer.metadata.name, cluster_namespace).status.phase
             == "Running", "the trainer to run")
    uuid, serial, pci = "GPU-2f0e5c1a-9a6e-4c5b-8d5e-6b1f7a3c9e01", "1652320031234", "0000:18:00.0"
    with Session(loops.engine) as s:  # the ledger knows the card in its slot
        apply_inventory(s, node, datetime(2026, 1, 1, tzinfo=UTC), [GpuSighting(uuid, pci, serial)])
        s.commit()

    returned: list[Returned] = []  # what GPU quarantine's hook would be told
    on_return(returned.append)
    request.addfinalizer(lambda: remove_return_hook(returned.append))

    first = seed_incident(loops.engine, node, gpu_uuid=uuid, serial=serial,
                          pods=[f"{cluster_namespace}/{trainer.metadata.name}/main"])
    loop = loops.offer(first)
    assert cluster_core.read_node(node).spec.unschedulable  # the cordon came first
    assert loop.stage == "queued" and "reboot_node" in loop.reason and "RESTART_BM" in loop.reason
    done = loops.drive(loop.loop_id, lambda lp: lp.final, "the first loop to end")

    assert done.stage == "returned", done.reason
    steps = [t.to_stage for t in loops.store.transitions(loop.loop_id)]
    assert steps == ["queued", "evidence", "draining", "executing", "validating", "returning", "returned"]
    # One reboot Job, one validation Job; the trainer was evicted before the node rebooted.
    assert sorted(jobs_on(batch, loop.loop_id).values()) == ["reboot", "validate"]
    [on_node] = [p for j, p in hosts.rebooted.items() if j in jobs_on(batch, loop.loop_id)]
    assert f"{cluster_namespace}/{trainer.metadata.name}" not in on_node
    assert done.details["drain"]["evicted"] == [f"{cluster_namespace}/{trainer.metadata.name}"]
    after = cluster_core.read_node(node)
    assert after.status.node_info.boot_id != boot  # the reboot happened
    assert not after.spec.unschedulable and ANN_CORDONED_AT not in (after.metadata.annotations or {})
    assert condition(cluster_core, node, "GPUHealthy").reason == "ReturnedToService"
    shown = condition(cluster_core, node, CONDITION_TYPE)
    assert shown is not None and (shown.status, shown.reason) == ("False", "ReturnedToService")
    validation = done.details["validation"]
    assert validation["passed"] and validation["version"] == "3.1.0"
    with Session(loops.engine) as s:
        assert s.get(Incident, first).lifecycle == "repaired"
    assert [(r.node, r.incident_id, r.gpu) for r in returned] == [(node, first, uuid)]

    second = seed_incident(loops.engine, node, gpu_uuid=uuid, serial=serial, previous=first)
    loop2 = loops.offer(second)
    assert loops.drive(loop2.loop_id, lambda lp: lp.final, "the second loop to end").stage == "returned"

    third = seed_incident(loops.engine, node, gpu_uuid=uuid, serial=serial, previous=second)
    loop3 = loops.offer(third)
    end = loops.drive(loop3.loop_id, lambda lp: lp.final, "the third loop to end")
    assert end.stage == "rma" and "after 2 remediation(s)" in end.reason
    assert jobs_on(batch, loop3.loop_id) == {}  # no further attempt
    assert loops.store.attempts(loop3.loop_id) == []
    node_now = cluster_core.read_node(node)
    assert node_now.spec.unschedulable and node_now.metadata.annotations[ANN_CORDONED_AT]  # stays out
    [rma] = loops.store.rmas(open_only=True)
    assert rma["card"] == f"serial:{serial}" and rma["pci_slot"] == pci
    with Session(loops.engine) as s:
        kinds = [e.kind for e in s.query(GpuLedgerEvent).filter_by(card=f"serial:{serial}").order_by(GpuLedgerEvent.id)]
        assert kinds == ["placed", "repaired", "repaired", "rma"]
        assert s.get(Incident, third).lifecycle == "rma"
        # A new card in the slot closes the RMA.
        apply_inventory(s, node, datetime.now(UTC), [GpuSighting("GPU-new", pci, "1652320099999")])
        s.commit()
    [closed] = loops.store.rmas(card=f"serial:{serial}")
    assert closed["closed_at"] is not None and closed["replaced_by"] == "serial:1652320099999"


def test_a_failed_reset_is_followed_by_exactly_one_reboot_and_nothing_is_reset_before_the_evidence(
        make_loops, kwok_node, hosts: Hosts, cluster_core: client.CoreV1Api,
        cluster_admin_client: client.ApiClient) -> None:
    summary = json.dumps({"path": "/var/log/xidpipe/nvidia-bug-report-x.log.gz", "bytes": 1234567,
                          "sha256": "ab" * 32})
    loops = make_loops(policy(
        evidence={"bug_report": True},
        jobs={"reset_gpu": job_template(**{OUTCOME: "Failed", "testcluster.xidpipe.io/exit-code": "3"}),
              "bug_report": job_template(**{OUTCOME: "Succeeded", MESSAGE: summary})}))
    node = kwok_node().metadata.name
    batch = client.BatchV1Api(cluster_admin_client)
    incident = seed_incident(loops.engine, node, xid=95, family="memory", evidence=False)
    loop = loops.offer(incident)
    assert "reset_gpu" in loop.reason and "RESET_GPU" in loop.reason

    # Without the node's capture of the fault nothing is reset: the loop waits in `evidence`.
    waiting = loops.drive(loop.loop_id, lambda lp: lp.stage == "evidence" and "capture" in lp.reason,
                          "the loop to wait for the evidence")
    for _ in range(5):
        loops.remediator.tick()
    assert loops.store.get(loop.loop_id).stage == "evidence"
    assert set(jobs_on(batch, waiting.loop_id).values()) <= {"bugreport"}
    with Session(loops.engine) as s:  # the agent's capture arrives
        event = s.query(FaultEvent).filter_by(incident_id=incident).one()
        add_evidence(s, node, event.record_id, event.id, datetime.now(UTC))
        s.commit()

    done = loops.drive(loop.loop_id, lambda lp: lp.final, "the loop to end")
    assert done.stage == "returned", done.reason
    attempts = [(a.kind, a.outcome) for a in loops.store.attempts(loop.loop_id)]
    assert attempts == [("bug_report", "succeeded"), ("reset_gpu", "failed"), ("reboot_node", "succeeded"),
                        ("validation", "succeeded")]
    assert sorted(jobs_on(batch, loop.loop_id).values()) == ["bugreport", "reboot", "reset", "validate"]
    assert done.details["bug_report"]["sha256"] == "ab" * 32
    failed_reset = next(a for a in loops.store.attempts(loop.loop_id) if a.kind == "reset_gpu")
    assert "exit code 3" in failed_reset.reason
    assert any("one node reboot follows" in t.reason for t in loops.store.transitions(loop.loop_id))


def test_failed_validation_keeps_the_cordon_and_the_ladder_goes_on_to_rma(
        make_loops, kwok_node, hosts: Hosts, cluster_core: client.CoreV1Api) -> None:
    loops = make_loops(policy(jobs={"validation": {"image": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
                                                   "command": ["/bin/sh", "-c", "dcgmi diag -r 2 -j"],
                                                   "runtime_class": "nvidia",
                                                   "pod_annotations": {OUTCOME: "Failed", MESSAGE: DCGM_FAIL}}}))
    node = kwok_node().metadata.name
    loop = loops.offer(seed_incident(loops.engine, node))
    done = loops.drive(loop.loop_id, lambda lp: lp.final, "the loop to end")

    assert done.stage == "rma" and "validation failed after a node reboot" in done.reason
    assert "Stress/sm_stress" in done.reason and "dcgmi diag -r 2 failed" in done.reason
    assert done.details["validation"]["findings"][0].startswith("Stress/sm_stress on GPU 0: fail")
    after = cluster_core.read_node(node)
    assert after.spec.unschedulable and ANN_CORDONED_AT in after.metadata.annotations
    assert condition(cluster_core, node, CONDITION_TYPE).reason == "RMA"


@pytest.mark.parametrize("how", ["kubectl uncordon", "xidpipe node release"])
def test_an_operators_uncordon_cancels_the_loop_and_its_job(
        how: str, make_loops, kwok_node, hosts: Hosts, cluster_core: client.CoreV1Api,
        cluster_admin_client: client.ApiClient) -> None:
    loops = make_loops(policy())
    node = kwok_node().metadata.name
    hosts.off.add(node)  # this machine never comes back from its reboot
    batch = client.BatchV1Api(cluster_admin_client)
    loop = loops.offer(seed_incident(loops.engine, node))
    waiting = loops.drive(loop.loop_id, lambda lp: lp.stage == "executing" and "reboot" in lp.reason,
                          "the loop to wait for the reboot")
    assert list(jobs_on(batch, waiting.loop_id).values()) == ["reboot"]

    if how == "kubectl uncordon":
        cluster_core.patch_node(node, {"spec": {"unschedulable": False}})
    else:
        assert loops.executor.release(node, by="alice", reason="swapped the riser").outcome == "done"
    done = loops.drive(loop.loop_id, lambda lp: lp.final, "the loop to end")

    assert done.stage == "cancelled" and "uncordoned" in done.reason
    if how != "kubectl uncordon":
        assert "by alice" in done.reason
    wait_for(lambda: not jobs_on(batch, loop.loop_id) or None, "the reboot Job to be deleted")
    assert [a.outcome for a in loops.store.attempts(loop.loop_id)] == ["cancelled"]
    assert condition(cluster_core, node, CONDITION_TYPE).reason == "Cancelled"
    assert not cluster_core.read_node(node).spec.unschedulable


def test_dry_run_decides_and_records_every_step_and_changes_nothing(
        make_loops, kwok_node, cluster_core: client.CoreV1Api, cluster_admin_client: client.ApiClient) -> None:
    loops = make_loops(policy(dry_run=True))
    node = kwok_node().metadata.name
    loop = loops.offer(seed_incident(loops.engine, node))
    assert loop.stage == "dry_run" and loop.final
    assert loop.details["plan"][-1] == "would lift xidpipe's cordon once validation passed"
    assert any("would create Job xidpipe-reboot-" in step for step in loop.details["plan"])
    loops.remediator.tick()
    assert jobs_on(client.BatchV1Api(cluster_admin_client), loop.loop_id) == {}
    assert loops.store.attempts(loop.loop_id) == []
    assert condition(cluster_core, node, CONDITION_TYPE) is None
    recorded = [r for r in loops.executor.store.recent(10) if r.action == "remediate"]
    assert recorded and recorded[-1].reason.startswith("dry run: reboot_node")


@pytest.mark.parametrize("past_deadline", ["hold", "proceed"])
def test_the_drain_honours_a_disruption_budget_and_past_its_deadline_holds_or_proceeds(
        past_deadline: str, make_loops, kwok_node, hosts: Hosts, cluster_core: client.CoreV1Api,
        cluster_admin_client: client.ApiClient, cluster_namespace: str) -> None:
    loops = make_loops(policy(drain={"deadline_s": 3, "past_deadline": past_deadline}))
    node = kwok_node().metadata.name
    app = {"app": unique("trainer")}
    pod = cluster_core.create_namespaced_pod(cluster_namespace, kwok_pod(unique("trainer"), node_name=node,
                                                                         labels=app))
    client.PolicyV1Api(cluster_admin_client).create_namespaced_pod_disruption_budget(
        cluster_namespace, client.V1PodDisruptionBudget(
            metadata=client.V1ObjectMeta(name=unique("pdb")),
            spec=client.V1PodDisruptionBudgetSpec(min_available=1,
                                                  selector=client.V1LabelSelector(match_labels=app))))
    wait_for(lambda: cluster_core.read_namespaced_pod(pod.metadata.name, cluster_namespace).status.phase
             == "Running", "the trainer to run")
    loop = loops.offer(seed_incident(loops.engine, node))
    key = f"{cluster_namespace}/{pod.metadata.name}"

    if past_deadline == "hold":
        held = loops.drive(loop.loop_id, lambda lp: lp.stage == "draining" and "never bypassed" in lp.reason,
                           "the drain to hold past its deadline")
        assert key in held.details["drain"]["blocked"]  # the budget's 429, kept in the report
        for _ in range(3):
            loops.remediator.tick()
        assert loops.store.get(loop.loop_id).stage == "draining"  # type: ignore[union-attr]
        assert loops.store.attempts(loop.loop_id) == []  # nothing rebooted
        assert cluster_core.read_namespaced_pod(pod.metadata.name, cluster_namespace).metadata.deletion_timestamp \
            is None  # the budget was never bypassed
    else:
        done = loops.drive(loop.loop_id, lambda lp: lp.final, "the loop to end")
        assert done.stage == "returned"
        drained = next(t for t in loops.store.transitions(loop.loop_id) if t.to_stage == "executing")
        assert "proceeding as the policy says" in drained.reason and key in drained.reason
