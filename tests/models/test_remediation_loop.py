"""The remediation loop's stage decisions (`models.remediation_loop`), its Jobs as values
(`models.remediation_jobs`) and the reliability figures (`models.reliability`), table-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from models.cordon import TAINT_KEY
from models.reliability import mean_time_between, mean_time_to_repair
from models.remediation import RemediationDecision
from models.remediation_jobs import (
    JobParams,
    bug_report_of,
    encode_termination,
    handoff_request,
    handoff_result,
    job_manifest,
    job_name,
    loop_id,
)
from models.remediation_loop import (
    JobState,
    NodeState,
    cancelled,
    drain_outcome,
    dry_run_plan,
    evidence_outcome,
    execution_outcome,
    overdue,
    validation_outcome,
)
from models.remediation_policy import Evidence, Execution, JobTemplate, RemediationDrain, RemediationPolicy
from models.vocabulary import RemediationAction, RemediationStage

T = datetime(2026, 12, 1, 12, tzinfo=UTC)
POLICY = RemediationPolicy()
PASS = ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "memory", '
        '"results": [{"gpu_ids": "0", "status": "PASS"}]}]}], "version": "3.3.9"}}')
FAIL = PASS.replace('"PASS"', '"FAIL", "warnings": ["bad row"]')
OURS = NodeState(exists=True, cordoned_for="inc-1", boot_id="b1", ready=True)


@pytest.mark.parametrize(("node", "requested", "why"), [
    (OURS, None, None),
    (OURS, "cancelled by bob: vendor", "cancelled by bob: vendor"),
    (NodeState(exists=False), None, "no longer exists"),
    (NodeState(exists=True, cordoned_for=None, released_by="alice"), None, "uncordoned by alice"),
    (NodeState(exists=True, cordoned_for="inc-2"), None, "uncordoned"),  # cordoned again, for another incident
])
def test_cancelled(node: NodeState, requested: str | None, why: str | None) -> None:
    found = cancelled(node, "inc-1", requested)
    assert (found is None) if why is None else (found is not None and why in found)


def bug(phase: str, message: str = "") -> JobState:
    return JobState("xidpipe-bugreport-1", phase, message)  # type: ignore[arg-type]


SUMMARY = '{"path": "/var/log/xidpipe/r.log.gz", "bytes": 10, "sha256": "aa"}'


@pytest.mark.parametrize(("capture", "cluster", "job", "waited", "policy", "result", "words"), [
    (True, True, None, 1, POLICY, "succeeded", "stored"),
    (False, True, None, 1, POLICY, "wait", "the node's capture"),
    (False, True, None, 700, POLICY, "failed", "a reset would destroy"),
    (False, True, None, 700, RemediationPolicy(evidence=Evidence(require_node_capture=False)), "succeeded", "stored"),
    (True, False, None, 1, POLICY, "wait", "the cluster's evidence"),
    (True, True, bug("running"), 1, POLICY, "wait", "nvidia-bug-report.sh's report"),
    (True, True, bug("succeeded", SUMMARY), 1, POLICY, "succeeded", "bug report attached"),
    (True, True, bug("succeeded", "no json"), 1, POLICY, "failed", "no report summary"),
    (True, True, bug("failed"), 1, POLICY, "failed", "nvidia-bug-report.sh failed"),
])
def test_evidence_before_anything_is_reset(capture: bool, cluster: bool, job: JobState | None, waited: float,
                                           policy: RemediationPolicy, result: str, words: str) -> None:
    out = evidence_outcome(capture, cluster, job, T, T + timedelta(seconds=waited), policy)
    assert out.result == result and words in out.reason


@pytest.mark.parametrize(("remaining", "blocked", "waited", "past", "verdict"), [
    (0, {}, 1, "hold", "done"),
    (1, {"ns/p": "429 budget"}, 10, "hold", "wait"),
    (1, {"ns/p": "429 budget"}, 700, "hold", "hold"),
    (1, {"ns/p": "429 budget"}, 700, "proceed", "proceed"),
    (2, {}, 10, "hold", "wait"),  # terminating pods: wait for them to go
])
def test_the_drain_honours_budgets_until_its_deadline(remaining: int, blocked: dict[str, str], waited: float,
                                                      past: str, verdict: str) -> None:
    policy = RemediationPolicy(drain=RemediationDrain(past_deadline=past))  # type: ignore[arg-type]
    got, why = drain_outcome(remaining, blocked, {}, T, T + timedelta(seconds=waited), policy)
    assert got == verdict
    if verdict == "hold":
        assert "never bypassed" in why


def job(phase: str, message: str = "", reason: str = "") -> JobState:
    return JobState("xidpipe-x", phase, message, reason)  # type: ignore[arg-type]


REBOOT, RESET, HAND_OFF = RemediationAction.REBOOT_NODE, RemediationAction.RESET_GPU, RemediationAction.HAND_OFF


@pytest.mark.parametrize(("remedy", "via", "j", "node", "waited", "result", "words"), [
    ("reboot_node", REBOOT, job("running"), OURS, 10, "wait", "waiting for the node to reboot"),
    ("reboot_node", REBOOT, job("failed", reason="DeadlineExceeded"),
     NodeState(exists=True, cordoned_for="inc-1", boot_id="b2", ready=True), 10, "succeeded", "b1 → b2"),
    ("reboot_node", REBOOT, job("succeeded"), NodeState(exists=True, boot_id="b2", ready=False), 10, "wait",
     "not Ready yet"),
    ("reboot_node", REBOOT, job("failed", reason="ImagePullBackOff"), OURS, 10, "failed", "boot ID did not change"),
    ("reboot_node", REBOOT, job("succeeded"), OURS, 2000, "failed", "within 1800 s"),
    ("reset_gpu", RESET, job("succeeded"), OURS, 10, "succeeded", "completed"),
    ("reset_gpu", RESET, job("failed", reason="Error, exit code 3"), OURS, 10, "failed", "exit code 3"),
    ("reset_gpu", RESET, job("running"), OURS, 700, "failed", "not confirmed within 600 s"),
    ("reset_gpu", HAND_OFF, None, NodeState(exists=True, handoff_result="k=succeeded"), 10, "succeeded",
     "reported success"),
    ("reset_gpu", HAND_OFF, None, NodeState(exists=True, handoff_result="k=failed:BMC timeout"), 10, "failed",
     "BMC timeout"),
    ("reset_gpu", HAND_OFF, None, NodeState(exists=True, handoff_result="other=succeeded"), 10, "wait", "waiting"),
    ("reboot_node", HAND_OFF, None, NodeState(exists=True, boot_id="b9", ready=True), 10, "succeeded", "rebooted"),
])
def test_a_reset_or_reboot_is_confirmed_by_what_the_node_shows(remedy: str, via: RemediationAction,
                                                               j: JobState | None, node: NodeState, waited: float,
                                                               result: str, words: str) -> None:
    out = execution_outcome(remedy, via, j, node, "b1", "k", T, T + timedelta(seconds=waited),  # type: ignore[arg-type]
                            POLICY)
    assert out.result == result and words in out.reason


@pytest.mark.parametrize(("j", "fault", "waited", "result", "words"), [
    (job("succeeded", encode_termination(PASS)), None, 60, "succeeded", "dcgmi diag -r 2 passed"),
    (job("succeeded", PASS), "Xid 79 (gpu_lost) on GPU-1", 60, "failed", "a new fault since the remediation"),
    (job("failed", encode_termination(FAIL)), None, 60, "failed", "memory on GPU 0: fail: bad row"),
    (job("failed", PASS, "BackoffLimitExceeded"), None, 60, "failed", "although its output reads as a pass"),
    (job("succeeded", "truncated H4sIAAA"), None, 60, "failed", "no JSON document"),
    (job("running"), None, 60, "wait", "waiting"),
    (job("running"), None, 2000, "failed", "did not finish"),
])
def test_validation_passes_only_on_a_pass_and_no_new_fault(j: JobState, fault: str | None, waited: float,
                                                           result: str, words: str) -> None:
    out, _ = validation_outcome(j, fault, T, T + timedelta(seconds=waited), POLICY)
    assert out.result == result and words in out.reason


def test_a_loop_is_overdue_past_its_deadline_until_it_ends() -> None:
    assert overdue(RemediationStage.DRAINING, T, T + timedelta(seconds=1))
    assert not overdue(RemediationStage.DRAINING, T, T)
    assert not overdue(RemediationStage.RETURNED, T, T + timedelta(days=1))


def test_the_dry_run_plan_names_each_step_and_job() -> None:
    reboot = RemediationDecision(action=REBOOT, remedy="reboot_node", rung="nvidia", reason="RESTART_BM")
    plan = dry_run_plan(reboot, POLICY, "rl-1", 2)
    assert plan[0].startswith("would wait for the incident's evidence") and "drain: node" in plan[1]
    assert plan[2] == f"would create Job {job_name('rl-1', 'reboot_node', 1)} (reboot_node)"
    assert plan[-1] == "would lift xidpipe's cordon once validation passed"
    handed = dry_run_plan(reboot.model_copy(update={"action": HAND_OFF}),
                          RemediationPolicy(execution=Execution(webhook_url="https://bmc.example")), "rl-1", 0)
    assert any("site's tooling (annotation and webhook)" in step for step in handed)
    rma = RemediationDecision(action=RemediationAction.RMA, rung="rma_now", reason="Xid 64")
    assert dry_run_plan(rma, POLICY, "rl-1", 0) == ["would end as rma: Xid 64"]


def test_a_job_is_pinned_to_its_node_tolerates_the_cordon_and_has_no_rights() -> None:
    template = JobTemplate(image="busybox:1", command=("sh", "-c", "nvidia-smi --gpu-reset -i {gpu} # {pci} {key}"),
                           host_root=True, pod_annotations={"site/owner": "gpu-ops"})
    name = job_name(loop_id("n1", "inc-1", "2026-12-01T12:00:00+00:00"), "reset_gpu", 1)
    assert name.startswith("xidpipe-reset-") and len(name) <= 63
    assert name == job_name(loop_id("n1", "inc-1", "2026-12-01T12:00:00+00:00"), "reset_gpu", 1)  # its key
    assert name != job_name(loop_id("n1", "inc-1", "2026-12-01T12:00:00+00:00"), "reset_gpu", 2)
    m = job_manifest("reset_gpu", template, JobParams("n1", "GPU-1", "0000:18:00.0", name), namespace="xidpipe-agent",
                     service_account="xidpipe-remediation", loop="rl-1", incident_id="inc-1", deadline_s=600, ttl_s=60)
    spec = m["spec"]["template"]["spec"]
    assert m["metadata"]["name"] == name and m["spec"]["backoffLimit"] == 0
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
    assert {t["key"] for t in spec["tolerations"]} == {TAINT_KEY, "node.kubernetes.io/unschedulable"}
    assert spec["automountServiceAccountToken"] is False and spec["serviceAccountName"] == "xidpipe-remediation"
    assert spec["containers"][0]["command"] == ["sh", "-c", f"nvidia-smi --gpu-reset -i GPU-1 # 0000:18:00.0 {name}"]
    assert spec["volumes"][0]["hostPath"]["path"] == "/" and "hostPID" not in spec
    assert m["spec"]["template"]["metadata"]["annotations"]["site/owner"] == "gpu-ops"


def test_what_jobs_and_the_site_say() -> None:
    assert bug_report_of(SUMMARY) is not None and bug_report_of(SUMMARY).sha256 == "aa"  # type: ignore[union-attr]
    assert bug_report_of("{}") is None
    body = handoff_request("k1", "reboot_node", "n1", "GPU-1", "inc-1", T)
    assert '"key": "k1"' in body and "xidpipe.io/remediation-result=k1=succeeded" in body
    assert handoff_result("k1=failed", "k1") == ("failed", "the site's tooling reported failure")
    assert handoff_result("k10=succeeded", "k1") is None and handoff_result("k1=maybe", "k1") is None


def test_mean_time_to_repair_and_between_incidents() -> None:
    h = timedelta(hours=1)
    assert mean_time_to_repair([("n1", T, T + h), ("n1", T, T + 3 * h), ("n2", T, T + h), ("", T, T + h)]) == {
        "n1": 7200.0, "n2": 3600.0}
    assert mean_time_between({"n1": [T + 4 * h, T, T + 2 * h], "n2": [T]}) == {"n1": 7200.0}
