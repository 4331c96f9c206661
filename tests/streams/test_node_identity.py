"""The node identity decision (`models.node_identity.judge`) and the worker's review cache."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from models.node_identity import DEFAULT_AGENT_ACCOUNT, TOKEN_HEADER, TokenReview, judge, token_expiry
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
    gate = NodeIdentityGate(reviews, account=DEFAULT_AGENT_ACCOUNT, audience="xidpipe", refused_ttl_s=30,
                            clock=lambda: now[0])

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
