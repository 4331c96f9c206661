"""A new step after the cordon decision is one module and one registration.

A step registered in `respond.cordon.steps` is run by the executor after the cordon, on the real
kube-apiserver as the responder's identity, recorded with its idempotency key, not run again on a
redelivery and completed by one after it failed; replay lists it with the cordon's steps.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pytest
from kubernetes import client

from models.cordon import ANN_CORDONED_AT, CordonRequest
from models.cordon_policy import CordonPolicy
from respond.cordon import steps
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon.retry import Backoff
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger
from respond.errors import TemporaryError
from tests.kube import unique
from xidpipe.replay import run_replay

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
NODE = "gpu-node-07"

# --- the step: its port, its class, one registration -------------------------------------------

ANN_RESET = "xidpipe.io/reset-requested-at"
SAMPLES = Path(__file__).resolve().parents[2] / "xidpipe" / "samples" / "cluster"


@runtime_checkable
class ResetRequests(Protocol):
    def annotate(self, name: str, annotations: dict[str, str]) -> None: ...


class RequestReset:
    """Asks for the faulty GPU's reset once the node is cordoned: a mark on the node that a reset
    controller acts on. `failures`: how many runs fail first (the controller unreachable)."""

    name = "request_reset"
    port = ResetRequests
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"cordon", "resume"})
    own_record = True

    def __init__(self) -> None:
        self.failures = 0

    def idempotency_key(self, req: CordonRequest) -> str:
        return f"{req.node}/{req.incident_id}/reset"

    def applies(self, policy: CordonPolicy) -> bool:
        return True

    def run(self, port: ResetRequests, ctx: StepContext) -> StepRecord:
        if self.failures:
            self.failures -= 1
            raise TemporaryError("reset controller unreachable")
        port.annotate(ctx.req.node, {ANN_RESET: ctx.at.isoformat()})
        return StepRecord(step=self.name, outcome="done", reason=f"reset of {ctx.req.gpu} requested",
                          key=self.idempotency_key(ctx.req), changes=["annotations"])


@pytest.fixture
def reset_step() -> Iterator[RequestReset]:
    step = RequestReset()
    steps.register(step)
    yield step
    steps.unregister(step.name)


@pytest.fixture
def gpu_node(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A GPU node in a pool of its own (the breaker allows its cordon), deleted after the test."""
    name = unique("gpu-node")
    admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels={"nvidia.com/gpu.present": "true", "xidpipe.io/pool": unique("pool")})))
    yield name
    admin_core.delete_node(name)


@pytest.fixture
def executor(worker_client: client.ApiClient, tmp_path: Path) -> Iterator[CordonExecutor]:
    """An executor acting as the responder's identity (the chart's RBAC and node policy)."""
    nodes = KubeNodes(worker_client, reporting_instance="xidpipe-test", backoff=Backoff(deadline_s=5.0))
    yield CordonExecutor(CordonPolicy(), JsonlActionStore(tmp_path / "actions.jsonl"), nodes)
    nodes.close()


def lost_gpu(node: str) -> CordonRequest:
    return CordonRequest(node=node, incident_id=unique("inc"), gpu="GPU-5d8c2a1e", family="gpu_lost", xids=(79,),
                         category="hardware", first_seen=T0, last_seen=T0, reason="GPU fell off the bus")


def action_rows(executor: CordonExecutor) -> list[dict[str, Any]]:
    assert isinstance(executor.store, JsonlActionStore)
    return [json.loads(line) for line in executor.store.path.read_text().splitlines()]


def test_a_registered_step_runs_after_the_cordon_once_per_cordon(
    reset_step: RequestReset, executor: CordonExecutor, gpu_node: str, admin_core: client.CoreV1Api,
) -> None:
    req = lost_gpu(gpu_node)

    first = executor.handle(req)
    node = admin_core.read_node(gpu_node)
    again = executor.handle(req)  # redelivered

    assert (first.outcome, first.decision) == ("done", "cordon") and node.spec.unschedulable
    [record] = first.steps
    assert (record.step, record.outcome, record.key) == ("request_reset", "done", f"{gpu_node}/{req.incident_id}/reset")
    annotations = node.metadata.annotations
    assert annotations[ANN_RESET] >= annotations[ANN_CORDONED_AT]  # after the cordon
    rows = action_rows(executor)
    assert [(r["action"], r["outcome"]) for r in rows] == [("cordon", "done"), ("request_reset", "done"),
                                                           ("cordon", "noop")]
    assert rows[1]["details"] == {"key": record.key, "cordoned_at": annotations[ANN_CORDONED_AT]}
    assert (again.outcome, again.steps) == ("noop", [])
    assert admin_core.read_node(gpu_node).metadata.resource_version == node.metadata.resource_version


def test_a_step_that_failed_is_completed_by_the_redelivery(
    reset_step: RequestReset, executor: CordonExecutor, gpu_node: str, admin_core: client.CoreV1Api,
) -> None:
    req = lost_gpu(gpu_node)
    reset_step.failures = 1

    failed = executor.handle(req)
    assert ANN_RESET not in admin_core.read_node(gpu_node).metadata.annotations
    completed = executor.handle(req)

    assert (failed.outcome, failed.retryable) == ("failed", True)
    assert failed.reason.endswith("then failed: reset controller unreachable")
    assert set(failed.changes) == {"unschedulable", "taint", "annotations", "condition", "event"}
    assert completed.outcome == "noop" and [r.step for r in completed.steps] == ["request_reset"]
    assert ANN_RESET in admin_core.read_node(gpu_node).metadata.annotations
    assert [(r["action"], r["outcome"]) for r in action_rows(executor)] == [
        ("cordon", "done"), ("cordon", "failed"), ("cordon", "noop"), ("request_reset", "done")]


def test_replay_lists_a_registered_step_with_the_cordons(reset_step: RequestReset, tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    shutil.copytree(SAMPLES, root)
    (root / "replay.json").write_text(json.dumps({"format": "xidpipe-replay", "version": 1,
                                                  "pool_nodes": {"": 100}}))

    cordons = run_replay(root).cluster.cordons()

    assert cordons and {c.steps for c in cordons} == {("cordon", "condition", "event", "request_reset")}


def test_an_adapter_without_a_steps_port_is_refused_at_start(tmp_path: Path) -> None:
    @runtime_checkable
    class GpuResets(Protocol):
        def reset_gpu(self, node: str, gpu: str) -> None: ...

    class ResetGpu(RequestReset):
        name = "reset_gpu"
        port = GpuResets

    steps.register(ResetGpu())
    try:
        with client.ApiClient() as api, pytest.raises(TypeError, match="GpuResets, the port of step 'reset_gpu'"):
            CordonExecutor(CordonPolicy(), JsonlActionStore(tmp_path / "a.jsonl"),
                           KubeNodes(api, reporting_instance="t"))
    finally:
        steps.unregister("reset_gpu")
