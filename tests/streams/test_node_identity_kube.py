"""The worker's node-identity gate on the real kube-apiserver, with real TokenReviews as the worker's
`xidpipe-stream` ServiceAccount: a flood of forged tokens is reviewed side by side within the bound and
parks the node it names without holding back another node's records; API errors are retried a bounded
number of times and then refused with the reason; a deleted agent pod's token stops working within the
verified-review lifetime."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from models.node_identity import TOKEN_HEADER, GatePolicy, TokenReview
from streams.node_identity import KubeTokenReviewer, NodeIdentityGate
from tests.kube import AGENT_NS, agent_pod_token, kubeconfig_for, stream_token, unique

pytestmark = pytest.mark.k8s

ACCOUNT = "system:serviceaccount:xidpipe:xidpipe-agent"


class Counted(KubeTokenReviewer):
    """The real TokenReview adapter, counting its calls and how many ran at once."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__("xidpipe", kubeconfig)
        self.calls = self.running = self.most = 0
        self._lock = threading.Lock()

    def review(self, token: str) -> TokenReview:
        with self._lock:
            self.calls += 1
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            return super().review(token)
        finally:
            with self._lock:
                self.running -= 1


def _records(*pairs: tuple[str, str]) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    return [(node.encode(), [(TOKEN_HEADER, token.encode())]) for node, token in pairs]


def _forged(genuine: str, n: int) -> str:
    """A token shaped like the genuine one, its signature changed: the API server refuses it."""
    head, body, _ = genuine.split(".")
    return f"{head}.{body}.forged{n:04d}" + "A" * 300


@pytest.fixture
def stream_kubeconfig(control_plane: Any, admin_core: client.CoreV1Api, rbac_applied: object,
                      tmp_path: Path) -> Path:
    return kubeconfig_for(control_plane, stream_token(admin_core), tmp_path / "stream.kubeconfig")


def _nodes(core: client.CoreV1Api, *names: str) -> None:
    for name in names:
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name)))


def test_a_flood_of_forged_tokens_is_reviewed_side_by_side_and_parks_only_the_node_it_names(
    admin_core: client.CoreV1Api, stream_kubeconfig: Path,
) -> None:
    honest, victim = unique("gpu-honest"), unique("gpu-victim")
    _nodes(admin_core, honest, victim)
    honest_token = agent_pod_token(admin_core, honest)[1]
    victim_token = agent_pod_token(admin_core, victim)[1]
    reviewer = Counted(stream_kubeconfig)
    policy = GatePolicy(reviews_in_flight=8, park_after=5)
    gate = NodeIdentityGate(reviewer, account=ACCOUNT, audience="xidpipe", policy=policy)
    assert [v.reason for v in asyncio.run(gate.check_many(_records((victim, victim_token))))] == ["verified"]

    # 400 distinct forged tokens keyed for the victim (any node's agent can send them), spread over 100
    # node names as well, around both nodes' own records, in one batch.
    flood = _records(*((victim, _forged(victim_token, n)) for n in range(400)))
    spread = _records(*((f"gpu-absent-{n}", _forged(honest_token, n)) for n in range(100)))
    batch = [*flood[:200], *_records((honest, honest_token), (victim, victim_token)), *flood[200:], *spread]
    started = time.monotonic()
    verdicts = [v.reason for v in asyncio.run(gate.check_many(batch))]
    elapsed = time.monotonic() - started

    assert verdicts[200:202] == ["verified", "verified"]
    on_victim = verdicts[:200] + verdicts[202:402]
    assert set(on_victim) == {"invalid_token", "parked"} and on_victim.count("invalid_token") <= 5 + 8
    assert verdicts[402:] == ["invalid_token"] * 100  # 100 nodes, one forged token each: none parked
    assert reviewer.most == 8, reviewer.most  # side by side, never past the bound
    assert reviewer.calls <= 1 + 1 + (5 + 8) + 100, reviewer.calls
    assert elapsed < 30, elapsed
    assert gate.refused["parked"] == on_victim.count("parked")


def test_api_errors_are_retried_a_bounded_number_of_times_then_refused_with_the_reason(
    control_plane: Any, admin_core: client.CoreV1Api, rbac_applied: object, tmp_path: Path,
) -> None:
    node = unique("gpu-node")
    _nodes(admin_core, node)
    token = agent_pod_token(admin_core, node)[1]
    policy = GatePolicy(review_attempts=3, retry_delay_s=0.1)
    # The API server refuses the reviewer (no right to create tokenreviews): HTTP 403, three times.
    forbidden = Counted(kubeconfig_for(control_plane, control_plane.token("nobody"), tmp_path / "nobody"))
    gate = NodeIdentityGate(forbidden, account=ACCOUNT, audience="xidpipe", policy=policy)
    (verdict,) = asyncio.run(gate.check_many(_records((node, token))))
    assert (verdict.reason, forbidden.calls) == ("unavailable", 3)
    assert "HTTP 403" in verdict.detail and "3 attempts" in verdict.detail and token not in verdict.detail
    # Nothing listens: connection refused, three times, in about the backoff's time.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"https://127.0.0.1:{sock.getsockname()[1]}"
    away = Counted(kubeconfig_for(control_plane, stream_token(admin_core), tmp_path / "away", server=closed))
    gate = NodeIdentityGate(away, account=ACCOUNT, audience="xidpipe", policy=policy)
    started = time.monotonic()
    (verdict,) = asyncio.run(gate.check_many(_records((node, token))))
    assert (verdict.reason, away.calls) == ("unavailable", 3) and time.monotonic() - started < 10
    assert "TokenReview failed" in verdict.detail


def test_a_deleted_agent_pods_token_stops_working_within_the_verified_lifetime(
    admin_core: client.CoreV1Api, stream_kubeconfig: Path,
) -> None:
    node = unique("gpu-node")
    _nodes(admin_core, node)
    pod, token = agent_pod_token(admin_core, node)
    now = [time.time()]
    reviewer = Counted(stream_kubeconfig)
    gate = NodeIdentityGate(reviewer, account=ACCOUNT, audience="xidpipe", policy=GatePolicy(verified_ttl_s=120),
                            clock=lambda: now[0])

    def reason() -> str:
        return asyncio.run(gate.check_many(_records((node, token))))[0].reason

    assert reason() == "verified"
    admin_core.delete_namespaced_pod(pod, AGENT_NS, grace_period_seconds=0)
    deleted = time.time()
    assert pod not in {p.metadata.name for p in admin_core.list_namespaced_pod(AGENT_NS).items}
    now[0] += 119
    assert reason() == "verified" and reviewer.calls == 1  # within the documented lifetime: the cached review
    # Past it, each record is reviewed again; the API server refuses the token once its own cache of
    # successful token authentications (10 s in kube-apiserver) lets go of it.
    deadline = time.monotonic() + 30
    reasons = []
    while time.monotonic() < deadline and "invalid_token" not in reasons:
        now[0] += 121
        reasons.append(reason())
        time.sleep(0.5)
    assert reasons[-1] == "invalid_token" and reviewer.calls == 1 + len(reasons), reasons
    assert time.time() - deleted < 15, reasons
