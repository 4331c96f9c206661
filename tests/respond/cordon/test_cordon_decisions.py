"""What the responder does around the cordon decision: which pods a drain skips, its Event names, and
every decision recorded as a dry run without a cluster. The decisions themselves: tests/models/test_cordon.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from respond.cordon.steps.drain import PodInfo, skip_reason
from tests.models.test_cordon import POLICY, T0, req


def _pod(node_name: str, annotations: dict[str, str] | None = None, owner: str | None = None,
         terminating: bool = False) -> PodInfo:
    return PodInfo(namespace="ns", name="p", node_name=node_name, annotations=annotations or {},
                   owner_kinds=(owner,) if owner else (), terminating=terminating)


@pytest.mark.parametrize(("pod", "reason"), [
    (_pod("n1"), None),
    (_pod("n1", owner="ReplicaSet"), None),
    (_pod("n1", owner="DaemonSet"), "DaemonSet pod"),
    (_pod("n1", annotations={"kubernetes.io/config.mirror": "abc"}), "mirror (static) pod"),
    (_pod("n1", terminating=True), "already terminating"),
    (_pod("n2"), "not on node n1"),
])
def test_drain_skips(pod: PodInfo, reason: str | None) -> None:
    assert skip_reason(pod, "n1") == reason


def test_event_names_are_stable_and_valid_for_long_node_names() -> None:
    from respond.cordon.kube_nodes import event_name

    long_node = "gpu-" + "a" * 249

    assert event_name("n1", "inc-1") == event_name("n1", "inc-1") != event_name("n1", "inc-2")
    assert len(event_name(long_node, "inc-1")) <= 253
    assert event_name("n1", "inc-1", "release") != event_name("n1", "inc-1")


def test_without_a_cluster_every_decision_is_a_recorded_dry_run(tmp_path: Path) -> None:
    from respond.cordon.action_log import JsonlActionStore
    from respond.cordon.executor import CordonExecutor

    store = JsonlActionStore(tmp_path / "a.jsonl")
    executor = CordonExecutor(POLICY, store, None)

    cordon = executor.handle(req(79))
    never = executor.handle(req(13))

    assert (cordon.outcome, cordon.decision, cordon.dry_run) == ("dry_run", "cordon", True)
    assert (never.outcome, never.decision) == ("skipped", "not_needed")
    assert [(r.action, r.outcome) for r in store.recent()] == [("cordon", "dry_run"), ("cordon", "skipped")]
    assert store.cordons_since(T0 - timedelta(days=1)) == 0  # dry runs do not count towards the breaker
