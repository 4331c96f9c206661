"""The node cache (list+watch) behind the breaker's pool counts, on the real kube-apiserver: what it
sees of changes made outside xidpipe, and the cap held by two executors acting at once, each with
its own cache and its own handle on one action record (as two responder processes have)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from models.cordon import ANN_CORDONED_AT
from models.cordon_policy import Breaker, CordonPolicy
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon.node_cache import Gone, NodeCache
from respond.cordon.retry import Backoff
from tests.kube import unique
from tests.polling import poll
from tests.respond.cordon.conftest import NodeFactory, xid79

POOL_LABEL = "xidpipe.io/pool"
WAIT_S = 30.0  # generous: the machine is shared


class SlowWatch(NodeCache):
    """A cache whose watch events arrive late (a loaded responder, a slow network)."""

    delay_s = 0.1

    def _apply(self, event: dict[str, Any], version: int) -> int:
        time.sleep(self.delay_s)
        return super()._apply(event, version)


class GatedWatch(NodeCache):
    """A cache whose watch events wait until `gate` opens."""

    gate = threading.Event()

    def _apply(self, event: dict[str, Any], version: int) -> int:
        self.gate.wait()
        return super()._apply(event, version)


@pytest.fixture
def make_kube(worker_client: client.ApiClient) -> Iterator[Callable[..., KubeNodes]]:
    made: list[KubeNodes] = []

    def factory(cache: type[NodeCache] | None = None) -> KubeNodes:
        kube = KubeNodes(worker_client, reporting_instance=unique("responder"), backoff=Backoff(deadline_s=10.0),
                         cache_wait_s=WAIT_S)
        if cache is not None:
            kube.cache = cache(kube.core, POOL_LABEL).start()
        made.append(kube)
        return kube

    yield factory
    for kube in made:
        kube.close()


def pool_counts(kube: KubeNodes, pool: str, fresh_as_of: int = 0) -> tuple[int, int]:
    view = kube.fleet_view(CordonPolicy(), {POOL_LABEL: pool}, 0, fresh_as_of)
    return view.pool_nodes, view.pool_cordoned_by_xidpipe


def test_the_cache_follows_changes_made_outside_xidpipe(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_kube: Callable[..., KubeNodes],
    make_executor: Callable[..., CordonExecutor],
) -> None:
    pool = unique("pool")
    names = [make_node(pool=pool) for _ in range(3)]
    kube = make_kube()
    assert pool_counts(kube, pool) == (3, 0)
    cache = kube.cache
    assert cache is not None

    # An operator's `kubectl cordon`: seen, and not counted as xidpipe's.
    admin_core.patch_node(names[0], {"spec": {"unschedulable": True}})
    poll("the operator's cordon", lambda: (e := cache.entry(names[0])) is not None and e.unschedulable, WAIT_S,
         interval=0.05)
    assert pool_counts(kube, pool) == (3, 0)
    assert make_executor(nodes=kube).handle(xid79(names[0])).decision == "foreign_cordon"

    # Another responder's cordon (our annotation on an unschedulable node), counted once the cache
    # is as fresh as its write; a node joining the pool and one leaving it change the size.
    claim = {"annotations": {ANN_CORDONED_AT: "2026-12-01T00:00:00+00:00"}}
    other = admin_core.patch_node(names[1], {"spec": {"unschedulable": True}, "metadata": claim})
    assert pool_counts(kube, pool, int(other.metadata.resource_version)) == (3, 1)
    make_node(pool=pool)
    admin_core.delete_node(names[2])
    poll("the pool's new size", lambda: pool_counts(kube, pool) == (3, 1), WAIT_S, interval=0.05)
    # Its release by an operator (uncordon) takes it out of xidpipe's count.
    released = admin_core.patch_node(names[1], {"spec": {"unschedulable": False}})
    assert pool_counts(kube, pool, int(released.metadata.resource_version)) == (3, 0)
    assert cache.relists == 1


class ExpiresOnce(NodeCache):
    """The server answers the first watch with 410 Gone, as it does once the watch's resourceVersion
    has been compacted away."""

    expired = False

    def _watch(self, version: int) -> int:
        if not self.expired:
            self.expired = True
            return self._apply({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                             "message": "too old resource version"}}, version)
        return super()._watch(version)


def test_an_expired_watch_lists_again_and_keeps_following(
    admin_core: client.CoreV1Api, make_kube: Callable[..., KubeNodes], make_node: NodeFactory,
) -> None:
    pool = unique("pool")
    make_node(pool=pool)
    kube = make_kube(ExpiresOnce)
    assert kube.cache is not None
    poll("the second list", lambda: kube.cache is not None and kube.cache.relists == 2, WAIT_S, interval=0.05)

    later = make_node(pool=pool)
    created = admin_core.read_node(later).metadata.resource_version
    assert pool_counts(kube, pool, int(created)) == (2, 0)
    with pytest.raises(Gone):
        kube.cache._apply({"type": "ERROR", "object": {"code": 410, "message": "gone"}}, 0)


def test_a_decision_waits_for_the_cordons_another_responder_recorded(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_kube: Callable[..., KubeNodes], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Responder B's watch lags; A cordons the pool up to its cap. B's next decision must count A's
    cordons (recorded with their resourceVersion) and trip the breaker, not cordon a third node."""
    pool = unique("pool")
    names = [make_node(pool=pool) for _ in range(10)]
    policy = CordonPolicy(breaker=Breaker(max_pool_share=0.2, max_per_hour=1000))  # cap: 2 of 10
    log = tmp_path / "actions.jsonl"
    gate = GatedWatch.gate = threading.Event()
    slow = make_kube(GatedWatch)
    assert pool_counts(slow, pool) == (10, 0)  # listed before A acts; its watch events wait at the gate
    a = CordonExecutor(policy, JsonlActionStore(log), make_kube())
    b = CordonExecutor(policy, JsonlActionStore(log), slow)

    assert [a.handle(xid79(n)).outcome for n in names[:2]] == ["done", "done"]
    assert slow.cache is not None and slow.cache.entry(names[0]).unschedulable is False  # type: ignore[union-attr]
    threading.Timer(0.5, gate.set).start()
    third = b.handle(xid79(names[2]))

    assert (third.outcome, third.decision) == ("blocked", "trip_breaker"), third.reason
    assert "2 of 10" in third.reason
    assert unschedulable(admin_core, pool) == 2
    assert "listing pool" not in caplog.text  # counted by B's cache once it caught up, not by a list


def unschedulable(admin_core: client.CoreV1Api, pool: str) -> int:
    response = admin_core.list_node(label_selector=f"{POOL_LABEL}={pool}", _preload_content=False)
    return sum(1 for n in json.loads(response.data)["items"] if (n.get("spec") or {}).get("unschedulable"))


def test_the_cap_holds_with_two_executors_acting_at_once(
    admin_core: client.CoreV1Api, make_node: NodeFactory, make_kube: Callable[..., KubeNodes], tmp_path: Path,
) -> None:
    pool = unique("pool")
    names = [make_node(pool=pool) for _ in range(40)]
    policy = CordonPolicy(breaker=Breaker(max_pool_share=0.1, max_per_hour=1000))  # cap: 4 of 40
    log = tmp_path / "actions.jsonl"
    executors = [CordonExecutor(policy, JsonlActionStore(log), make_kube()),
                 CordonExecutor(policy, JsonlActionStore(log), make_kube(SlowWatch))]
    burst = names[:16]
    start = threading.Barrier(8)

    def handle(i: int) -> str:
        if i < 8:
            start.wait()
        return executors[i % 2].handle(xid79(burst[i])).outcome

    with ThreadPoolExecutor(8) as threads:
        outcomes = Counter(threads.map(handle, range(len(burst))))

    assert unschedulable(admin_core, pool) == 4
    assert outcomes["done"] == 4 and outcomes["blocked"] == 1, outcomes
    assert outcomes["skipped"] == len(burst) - 5, outcomes
    done = [json.loads(line) for line in log.read_text().splitlines()]
    assert sum(1 for r in done if (r["action"], r["outcome"]) == ("cordon", "done")) == 4
    assert sum(1 for r in done if r["action"] == "breaker_trip") == 1
