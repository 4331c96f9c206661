"""The drain's decisions over plain pod values: what it skips, evicts, reports gone, failed or blocked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from models.cordon import PodRef
from models.cordon_policy import Drain
from respond.cordon.steps.drain import PodInfo, drain_gpu_pods
from respond.errors import ActionError, PermanentError, TemporaryError


@dataclass
class Pods:
    """The node's pods in memory; `refusals` answers each pod's evictions in turn (then it is evicted)."""

    pods: dict[str, PodInfo] = field(default_factory=dict)
    refusals: dict[str, list[ActionError]] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)

    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.pods.get(f"{namespace}/{name}")

    def node_pods(self, node: str) -> list[PodInfo]:
        return [p for p in self.pods.values() if p.node_name == node]

    def evict(self, pod: PodInfo, grace_period_s: int | None) -> bool:
        if pod.key not in self.pods:
            return False
        queued = self.refusals.get(pod.key) or []
        if queued:
            raise queued.pop(0)
        self.evicted.append(pod.key)
        del self.pods[pod.key]
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def pod(name: str, node: str = "n1", **kw: Any) -> PodInfo:
    return PodInfo(namespace="ns", name=name, node_name=node, **kw)


def refs(*names: str) -> tuple[PodRef, ...]:
    return tuple(PodRef(namespace="ns", name=n) for n in names)


def test_named_pods_are_evicted_skipped_or_reported_gone() -> None:
    port = Pods({p.key: p for p in (pod("a"), pod("ds", owner_kinds=("DaemonSet",)), pod("b", node="n2"))})

    report = drain_gpu_pods(port, "n1", refs("a", "ds", "b", "gone"), Drain(enabled=True))

    assert report.evicted == ["ns/a"] and report.gone == ["ns/gone"]
    assert report.skipped == {"ns/ds": "DaemonSet pod", "ns/b": "not on node n1"}
    assert report.complete and report.attempts == 1


def test_a_refused_eviction_backs_off_until_the_budget_allows_it() -> None:
    clock = Clock()
    budget = TemporaryError("HTTP 429 Too Many Requests: disruption budget", 429)
    port = Pods({"ns/a": pod("a")}, refusals={"ns/a": [budget, budget]})

    report = drain_gpu_pods(port, "n1", refs("a"), Drain(enabled=True, deadline_s=10, backoff_initial_s=0.1),
                            sleep=clock.sleep, clock=lambda: clock.now)

    assert report.evicted == ["ns/a"] and report.complete
    assert clock.sleeps == [0.1, 0.2] and report.attempts == 3


def test_refusals_past_the_deadline_are_blocked_and_permanent_ones_failed() -> None:
    clock = Clock()
    port = Pods({"ns/a": pod("a"), "ns/b": pod("b")},
                refusals={"ns/a": [TemporaryError("disruption budget", 429)] * 100,
                          "ns/b": [PermanentError("HTTP 403 Forbidden", 403)]})

    report = drain_gpu_pods(port, "n1", refs("a", "b"), Drain(enabled=True, deadline_s=1, backoff_initial_s=0.2,
                                                             backoff_max_s=0.4), sleep=clock.sleep,
                            clock=lambda: clock.now)

    assert report.blocked == {"ns/a": "disruption budget"} and report.failed == {"ns/b": "HTTP 403 Forbidden"}
    assert not report.complete and port.evicted == [] and clock.now <= 1


def test_unattributed_incidents_take_only_the_nodes_gpu_pods_when_asked() -> None:
    gpu = pod("gpu", resources=frozenset({"nvidia.com/gpu", "cpu"}))
    port = Pods({p.key: p for p in (gpu, pod("cpu", resources=frozenset({"cpu"})), pod("other", node="n2"))})

    off = drain_gpu_pods(port, "n1", (), Drain(enabled=True))
    on = drain_gpu_pods(port, "n1", (), Drain(enabled=True, unattributed="gpu_requesting"))

    assert off.evicted == [] and on.evicted == ["ns/gpu"]
