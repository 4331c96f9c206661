"""The node identity decision (`models.node_identity.judge`) and the worker's gate: its review cache, its
concurrency bound, parked nodes and bounded retries (the same on the real kube-apiserver:
`tests/streams/test_node_identity_kube.py`)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time

import pytest

from models.node_identity import DEFAULT_AGENT_ACCOUNT, TOKEN_HEADER, GatePolicy, TokenReview, judge, token_expiry
from streams.node_identity import NodeIdentityGate, ReviewUnavailable, header_value

GOOD = TokenReview(True, DEFAULT_AGENT_ACCOUNT, "gpu-node-1", ("xidpipe",))


@pytest.mark.parametrize(("key", "review", "reason"), [
    ("gpu-node-1", GOOD, "verified"),
    ("gpu-node-1", None, "missing_token"),
    ("gpu-node-1", TokenReview(False, error="token has expired"), "invalid_token"),
    ("gpu-node-1", TokenReview(True, DEFAULT_AGENT_ACCOUNT, "gpu-node-1", ("https://kubernetes.default.svc",)),
     "wrong_audience"),
    ("gpu-node-1", TokenReview(True, "system:serviceaccount:team-a:default", "gpu-node-1", ("xidpipe",)),
     "wrong_account"),
    ("gpu-node-1", TokenReview(True, DEFAULT_AGENT_ACCOUNT, None, ("xidpipe",)), "no_node_claim"),
    ("gpu-node-2", GOOD, "node_mismatch"),
    (None, GOOD, "invalid_key"),
    (None, None, "invalid_key"),
])
def test_judge(key: str | None, review: TokenReview | None, reason: str) -> None:
    verdict = judge(key, review, account=DEFAULT_AGENT_ACCOUNT, audience="xidpipe")
    assert verdict.reason == reason and verdict.accepted == (reason == "verified") and verdict.detail


def _jwt(claims: dict[str, object]) -> str:
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{body}.c2ln"


def test_token_expiry_reads_exp_only_from_a_jwt() -> None:
    assert token_expiry(_jwt({"exp": 1_900_000_000})) == 1_900_000_000
    assert token_expiry(_jwt({"exp": "soon"})) is None
    assert token_expiry("not-a-jwt") is None and token_expiry("a.!!!.c") is None


class Reviews:
    """A reviewer that answers from a table, fails the first `outages` calls, and counts calls."""

    def __init__(self, answers: dict[str, TokenReview], outages: int = 0) -> None:
        self.answers, self.outages, self.calls = answers, outages, 0

    def review(self, token: str) -> TokenReview:
        self.calls += 1
        if self.outages:
            self.outages -= 1
            raise ReviewUnavailable("TokenReview failed: ConnectionRefusedError")
        return self.answers.get(token, TokenReview(False, error="invalid bearer token"))


def test_reviews_are_cached_until_the_token_expires_and_refusals_briefly() -> None:
    now = [1_800_000_000.0]
    good = _jwt({"exp": now[0] + 600})
    reviews = Reviews({good: GOOD}, outages=2)
    gate = NodeIdentityGate(reviews, account=DEFAULT_AGENT_ACCOUNT, audience="xidpipe",
                            policy=GatePolicy(refused_ttl_s=30), clock=lambda: now[0])

    async def check(key: str, token: str | None) -> str:
        headers = [(TOKEN_HEADER, token.encode())] if token else []
        return (await gate.check(key.encode(), headers)).reason

    async def scenario() -> None:
        # The API server is away twice: the record waits, it is not refused.
        assert await check("gpu-node-1", good) == "verified"
        assert reviews.calls == 3
        assert [await check("gpu-node-1", good) for _ in range(50)] == ["verified"] * 50
        assert await check("gpu-node-9", good) == "node_mismatch"  # same token, another node: no new review
        assert reviews.calls == 3
        assert [await check("gpu-node-9", "forged") for _ in range(100)] == ["invalid_token"] * 100
        assert reviews.calls == 4  # a flood of one forged token costs one review per 30 s
        now[0] += 31
        assert await check("gpu-node-9", "forged") == "invalid_token" and reviews.calls == 5
        now[0] += 600
        assert await check("gpu-node-1", good) == "verified" and reviews.calls == 6  # expired: reviewed again
        assert await check("gpu-node-1", None) == "missing_token"

    asyncio.run(scenario())
    assert gate.refused == {"node_mismatch": 1, "invalid_token": 101, "missing_token": 1}


def test_header_value_reads_pairs_and_mappings() -> None:
    assert header_value([("other", b"x"), (TOKEN_HEADER, b"t")], TOKEN_HEADER) == b"t"
    assert header_value({TOKEN_HEADER: b"t"}, TOKEN_HEADER) == b"t"
    assert header_value([(TOKEN_HEADER, b"")], TOKEN_HEADER) is None and header_value(None, TOKEN_HEADER) is None


def _gate(reviewer: object, now: list[float], **policy: float) -> NodeIdentityGate:
    return NodeIdentityGate(reviewer, account=DEFAULT_AGENT_ACCOUNT, audience="xidpipe",  # type: ignore[arg-type]
                            policy=GatePolicy(**policy), clock=lambda: now[0])  # type: ignore[arg-type]


def _records(*pairs: tuple[str, str]) -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    return [(node.encode(), [(TOKEN_HEADER, token.encode())]) for node, token in pairs]


class SlowReviews(Reviews):
    """Answers after `latency_s` in the calling thread, and records how many reviews ran at once."""

    def __init__(self, answers: dict[str, TokenReview], latency_s: float, outages: int = 0) -> None:
        super().__init__(answers, outages)
        self.latency_s, self.running, self.most = latency_s, 0, 0
        self._lock = threading.Lock()

    def review(self, token: str) -> TokenReview:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(self.latency_s)
            with self._lock:
                return super().review(token)
        finally:
            with self._lock:
                self.running -= 1


def test_a_batch_of_forged_tokens_is_reviewed_side_by_side_within_the_bound() -> None:
    now = [1_800_000_000.0]
    good = _jwt({"exp": now[0] + 3600})
    reviews = SlowReviews({good: GOOD}, latency_s=0.02)
    gate = _gate(reviews, now, reviews_in_flight=16)
    batch = _records(*((f"gpu-node-{n}", f"forged-{n}") for n in range(400)), ("gpu-node-1", good))
    started = time.monotonic()
    verdicts = asyncio.run(gate.check_many(batch))
    elapsed = time.monotonic() - started
    assert [v.reason for v in verdicts] == ["invalid_token"] * 400 + ["verified"]
    assert reviews.calls == 401 and reviews.most == 16
    assert elapsed < 400 * 0.02 / 4, elapsed  # one after another took 8 s


def test_one_token_sent_many_times_at_once_is_reviewed_once() -> None:
    now = [1_800_000_000.0]
    good = _jwt({"exp": now[0] + 3600})
    reviews = SlowReviews({good: GOOD}, latency_s=0.05)
    verdicts = asyncio.run(_gate(reviews, now).check_many(_records(*[("gpu-node-1", good)] * 50)))
    assert {v.reason for v in verdicts} == {"verified"} and reviews.calls == 1


def test_a_node_whose_records_fail_is_parked_and_the_others_are_not() -> None:
    now = [1_800_000_000.0]
    honest, victim = _jwt({"exp": now[0] + 3600, "n": 1}), _jwt({"exp": now[0] + 3600, "n": 2})
    reviews = SlowReviews({honest: GOOD, victim: TokenReview(True, DEFAULT_AGENT_ACCOUNT, "gpu-node-2", ("xidpipe",))},
                          latency_s=0.001)
    gate = _gate(reviews, now, reviews_in_flight=4, park_after=5, park_window_s=60, park_s=60)
    assert [v.reason for v in asyncio.run(gate.check_many(_records(("gpu-node-2", victim))))] == ["verified"]
    # 400 forged tokens keyed for gpu-node-2 (any node's agent can send them), among both nodes' own records.
    flood = _records(*((("gpu-node-2", f"forged-{n}")) for n in range(400)))
    batch = [*flood[:200], *_records(("gpu-node-1", honest), ("gpu-node-2", victim)), *flood[200:]]
    verdicts = [v.reason for v in asyncio.run(gate.check_many(batch))]
    assert verdicts[200:202] == ["verified", "verified"]  # neither node's own records held back or refused
    forged = verdicts[:200] + verdicts[202:]
    assert set(forged) == {"invalid_token", "parked"} and forged.count("invalid_token") <= 5 + 4
    assert reviews.calls <= 1 + 1 + 5 + 4
    parked = next(v for v in asyncio.run(gate.check_many(_records(("gpu-node-2", "forged-x")))))
    assert parked.reason == "parked" and "gpu-node-2" in parked.detail and "forged" not in parked.detail
    # Parked for park_s: then its unknown tokens are reviewed again.
    now[0] += 61
    calls = reviews.calls
    assert [v.reason for v in asyncio.run(gate.check_many(_records(("gpu-node-2", "forged-y"))))] == ["invalid_token"]
    assert reviews.calls == calls + 1


def test_a_verified_token_is_reviewed_again_after_the_verified_ttl_even_when_its_node_is_parked() -> None:
    now = [1_800_000_000.0]
    token = _jwt({"exp": now[0] + 3600})
    reviews = Reviews({token: GOOD})
    gate = _gate(reviews, now, verified_ttl_s=120, park_after=2)

    def reasons(*pairs: tuple[str, str]) -> list[str]:
        return [v.reason for v in asyncio.run(gate.check_many(_records(*pairs)))]

    assert reasons(("gpu-node-1", token)) == ["verified"] and reviews.calls == 1
    now[0] += 119
    assert reasons(("gpu-node-1", token)) == ["verified"] and reviews.calls == 1
    assert [*reasons(("gpu-node-1", "f1")), *reasons(("gpu-node-1", "f2")), *reasons(("gpu-node-1", "f3"))] == [
        "invalid_token", "invalid_token", "parked"]
    now[0] += 2  # stale: asked again, parked or not (the pod may be gone)
    assert reasons(("gpu-node-1", token)) == ["verified"] and reviews.calls == 4
    reviews.answers[token] = TokenReview(False, error="pod xidpipe-agent-x has been deleted")
    now[0] += 121
    assert reasons(("gpu-node-1", token)) == ["invalid_token"] and reviews.calls == 5


def test_api_errors_are_retried_a_bounded_number_of_times_then_refused_with_the_reason() -> None:
    now = [1_800_000_000.0]
    good = _jwt({"exp": now[0] + 3600})
    reviews = Reviews({good: GOOD}, outages=10**6)
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    gate = NodeIdentityGate(reviews, account=DEFAULT_AGENT_ACCOUNT, audience="xidpipe",
                            policy=GatePolicy(review_attempts=3, retry_delay_s=0.5), clock=lambda: now[0], sleep=sleep)
    (verdict,) = asyncio.run(gate.check_many(_records(("gpu-node-1", good))))
    assert (verdict.accepted, verdict.reason) == (False, "unavailable")
    assert "3 attempts" in verdict.detail and "ConnectionRefusedError" in verdict.detail
    assert reviews.calls == 3 and slept == [0.5, 1.0]
    reviews.outages = 0  # not cached: the API server back, a record after `outage_s` is reviewed
    now[0] += 11
    assert [v.reason for v in asyncio.run(gate.check_many(_records(("gpu-node-1", good))))] == ["verified"]
    assert gate.refused["unavailable"] == 1


def test_while_the_api_server_is_down_a_token_verified_before_passes_and_no_batch_waits() -> None:
    now = [1_800_000_000.0]
    known, new = _jwt({"exp": now[0] + 3600, "n": 1}), _jwt({"exp": now[0] + 3600, "n": 2})
    reviews = Reviews({known: GOOD, new: GOOD})
    slept: list[float] = []

    async def sleep(delay: float) -> None:
        slept.append(delay)

    gate = NodeIdentityGate(reviews, account=DEFAULT_AGENT_ACCOUNT, audience="xidpipe", clock=lambda: now[0],
                            policy=GatePolicy(verified_ttl_s=120, review_attempts=3, outage_s=10), sleep=sleep)

    def reasons(*pairs: tuple[str, str]) -> list[str]:
        return [v.reason for v in asyncio.run(gate.check_many(_records(*pairs)))]

    assert reasons(("gpu-node-1", known)) == ["verified"]
    now[0] += 300  # stale: reviewed again at its next record, but the API server is gone
    reviews.outages = 10**6
    assert reasons(("gpu-node-1", known), ("gpu-node-1", new)) == ["verified", "unavailable"]
    assert reviews.calls <= 1 + 2 * 3
    calls, waited = reviews.calls, len(slept)
    now[0] += 5  # within outage_s: nobody asks, nobody waits
    assert reasons(("gpu-node-1", known), ("gpu-node-1", new), ("gpu-node-1", "forged")) == [
        "verified", "unavailable", "unavailable"]
    assert (reviews.calls, len(slept)) == (calls, waited)
    now[0] += 6
    reviews.outages = 0
    assert reasons(("gpu-node-1", new)) == ["verified"] and reviews.calls == calls + 1
    now[0] += 3600  # the known token has expired: no grace for it, the API server or not
    reviews.outages = 10**6
    assert reasons(("gpu-node-1", known)) == ["unavailable"]
