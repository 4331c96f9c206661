"""Node identity on the worker: each node record's token is reviewed by the kube-apiserver
(TokenReview) and judged by `models.node_identity.judge` against the node its key names
(`models.topics.key_node`: a state record's key is `<node>/<kind>`).

Why TokenReview of a projected ServiceAccount token: the kubelet already gives every agent pod a
short-lived token bound to the pod (and so to its node), refreshed without our help; the API server
that signed it is the only party that needs to hold a key, it refuses a token as soon as its pod is
gone, and the worker needs no key material, only `create tokenreviews`. Signing records with a
per-node key would need a key distribution of our own; mTLS client certificates per node would need
a CA and a Kafka principal per node.

The gate isolates nodes (`models.node_identity.GatePolicy` says how, with its figures): a batch's
reviews run side by side within a bound, one per distinct token; a review is reused for a short time
(accepted ones 2 minutes and never past the token's `exp`, so a deleted pod's token stops working;
refused ones 30 s); a node whose records keep coming with refused tokens is parked (its tokens not
verified before are refused without a review for a minute) while every other node's records pass;
and a TokenReview that fails for another reason than the token (unreachable, 429, 5xx, our own
rights) is asked again a bounded number of times, then the record is refused as `unavailable` and
goes to the dead-letter topic with the error, instead of holding every node's records.

This is the only module of `streams` that imports `kubernetes` (an import-linter contract).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from models.node_identity import (
    NODE_NAME_EXTRA,
    TOKEN_HEADER,
    GatePolicy,
    IdentityVerdict,
    Parking,
    TokenReview,
    judge,
    review_fresh_until,
    token_expiry,
)
from models.topics import key_node

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 16 * 1024
DEFAULT_POLICY = GatePolicy()
REVIEW_TIMEOUT_S = 5.0  # one TokenReview request; `GatePolicy.review_attempts` of them at most per token


class Reviewer(Protocol):
    def review(self, token: str) -> TokenReview: ...


class ReviewUnavailable(Exception):
    """The API server could not review the token (unreachable, 5xx, throttled): try again."""


class KubeTokenReviewer:
    """TokenReview through the Kubernetes client (synchronous: called in a thread)."""

    def __init__(self, audience: str, kubeconfig: Path | None = None) -> None:
        from kubernetes import client, config

        if kubeconfig is not None:
            api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        else:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            api_client = client.ApiClient(configuration)
        self._api = client.AuthenticationV1Api(api_client)
        self._audience = audience

    def review(self, token: str) -> TokenReview:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        body = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[self._audience]))
        try:
            status = self._api.create_token_review(body, _request_timeout=REVIEW_TIMEOUT_S).status
        except ApiException as exc:
            # 4xx other than throttling: our own rights or request are wrong; the operator must act.
            raise ReviewUnavailable(f"TokenReview failed: HTTP {exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3 connection errors, timeouts
            raise ReviewUnavailable(f"TokenReview failed: {type(exc).__name__}") from None
        if status is None:
            raise ReviewUnavailable("TokenReview answered without a status")
        user = status.user
        extra: Mapping[str, list[str]] = (user.extra or {}) if user is not None else {}
        nodes = extra.get(NODE_NAME_EXTRA) or []
        return TokenReview(
            authenticated=bool(status.authenticated),
            username=(user.username or "") if user is not None else "",
            node=nodes[0] if len(nodes) == 1 else None,
            audiences=tuple(status.audiences or ()),
            error=status.error or "",
        )


class NodeIdentityGate:
    """Judges node records by their token header; counts what it refused, by reason.

    `check_many` judges a batch's records side by side: reviews run in a pool of
    `policy.reviews_in_flight` threads, one per distinct token (records carrying a token already under
    review wait for that review), so the batch waits for the slowest wave of reviews, not for their sum.
    """

    def __init__(self, reviewer: Reviewer, *, account: str, audience: str, policy: GatePolicy = DEFAULT_POLICY,
                 cache_size: int = 20_000, clock: Any = time.time, sleep: Any = asyncio.sleep) -> None:
        self._reviewer = reviewer
        self._account = account
        self._audience = audience
        self._policy = policy
        self._pool = ThreadPoolExecutor(policy.reviews_in_flight, thread_name_prefix="tokenreview")
        # By SHA-256 of the token: (fresh until, review, the token's `exp`); an accepted review stays past
        # its freshness as the mark of a token once verified: parking lets it through to be reviewed again,
        # and while the API server cannot answer it is judged on that review until the token expires.
        self._cache: OrderedDict[bytes, tuple[float, TokenReview, float]] = OrderedDict()
        self._inflight: dict[bytes, asyncio.Future[TokenReview | str]] = {}
        self._parking = Parking(policy)
        self._semaphore: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._down = (0.0, "")  # (until when the API server is taken as down, why)
        self._cache_size = cache_size
        self._clock = clock
        self._sleep = sleep
        self.refused: Counter[str] = Counter()
        self.reviews = 0  # TokenReviews sent (cache misses, retries included)

    async def check_many(self, records: Sequence[tuple[bytes | None, Any]]) -> list[IdentityVerdict]:
        """The verdicts of (key, headers) pairs, in their order, judged side by side."""
        return list(await asyncio.gather(*(self.check(key, headers) for key, headers in records)))

    async def check(self, key: bytes | None, headers: Any) -> IdentityVerdict:
        verdict = await self._judge(key, headers)
        if not verdict.accepted:
            self.refused[verdict.reason] += 1
        return verdict

    async def _judge(self, key: bytes | None, headers: Any) -> IdentityVerdict:
        named = key_node(key) if key is not None else None
        node = named.decode("ascii") if named is not None else None
        token = header_value(headers, TOKEN_HEADER)
        if node is None or token is None:
            return judge(node, None, account=self._account, audience=self._audience)
        if len(token) > MAX_TOKEN_BYTES:
            return judge(node, TokenReview(False, error=f"token longer than {MAX_TOKEN_BYTES} bytes"),
                         account=self._account, audience=self._audience)
        digest = hashlib.sha256(token).digest()
        now = self._clock()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            self._cache.move_to_end(digest)
            return judge(node, hit[1], account=self._account, audience=self._audience)
        pending = self._inflight.get(digest)
        if pending is not None:  # the same token from another record: its review, not one more
            outcome = await asyncio.shield(pending)
        else:
            async with self._slots():  # parking is decided when a review could start, not when the record came
                parked = self._parked(digest, node)
                if parked is not None:
                    return parked
                outcome = await self._review_once(digest, token, node)
        if isinstance(outcome, str):
            return self._unavailable(node, outcome, hit)
        return judge(node, outcome, account=self._account, audience=self._audience)

    def _unavailable(self, node: str, why: str, hit: tuple[float, TokenReview, float] | None) -> IdentityVerdict:
        """No review could be had: a token verified before, not yet expired, is judged on its last review
        (an API server outage does not stop the fleet); any other is refused with the reason."""
        if hit is not None and hit[1].authenticated and hit[2] > self._clock():
            return judge(node, hit[1], account=self._account, audience=self._audience)
        return IdentityVerdict(False, "unavailable", why)

    def _slots(self) -> asyncio.Semaphore:
        """The running loop's bound on reviews in flight (an asyncio.Semaphore belongs to one loop)."""
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore[0] is not loop:
            self._semaphore = (loop, asyncio.Semaphore(self._policy.reviews_in_flight))
        return self._semaphore[1]

    def _parked(self, digest: bytes, node: str) -> IdentityVerdict | None:
        """A `parked` refusal when `node` is parked and this token was never verified, else None."""
        hit = self._cache.get(digest)
        if hit is not None and hit[1].authenticated:  # verified before: reviewed again, parked or not
            return None
        now = self._clock()
        until = self._parking.parked_until(node, now)
        if until is None:
            return None
        p = self._policy
        return IdentityVerdict(False, "parked", f"records for node {node!r} came with {p.park_after} refused tokens "
                               f"within {p.park_window_s:g} s: its tokens not verified before are refused without a "
                               f"review for {until - now:.0f} s more")

    def _note(self, node: str, verdict: IdentityVerdict) -> None:
        """Count a refusal after a review against the node the record's key names."""
        if not verdict.accepted and self._parking.refused(node, self._clock()):
            p = self._policy
            log.warning("node %s parked for %.0f s: %d refused tokens within %.0f s", node, p.park_s, p.park_after,
                        p.park_window_s)

    async def _review_once(self, digest: bytes, token: bytes, node: str) -> TokenReview | str:
        """The review of `token` (for a record keyed `node`), shared by every record that waits for it; a
        string says why none came."""
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > self._clock():  # reviewed while this record waited for a slot
            return hit[1]
        pending = self._inflight.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[TokenReview | str] = asyncio.get_running_loop().create_future()
        self._inflight[digest] = future
        try:
            outcome = await self._review_retrying(token.decode("ascii", "replace"))
            if not isinstance(outcome, str):
                self._remember(digest, token, outcome)
                self._note(node, judge(node, outcome, account=self._account, audience=self._audience))
            future.set_result(outcome)
            return outcome
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: the waiters get it, nobody else needs to
            raise
        finally:
            del self._inflight[digest]

    def _remember(self, digest: bytes, token: bytes, review: TokenReview) -> None:
        now, text = self._clock(), token.decode("ascii", "replace")
        fresh = review_fresh_until(review, text, now, self._policy)
        self._cache[digest] = (fresh, review, token_expiry(text) or fresh)
        self._cache.move_to_end(digest)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def _review_retrying(self, token: str) -> TokenReview | str:
        """The review, asked `review_attempts` times at most; after that many failures the API server is
        not asked again for `outage_s` (every review fails at once meanwhile, so no batch waits on it)."""
        if self._clock() < self._down[0]:
            return self._down[1]
        loop = asyncio.get_running_loop()
        delay = self._policy.retry_delay_s
        for attempt in range(1, self._policy.review_attempts + 1):
            try:
                self.reviews += 1
                review = await loop.run_in_executor(self._pool, self._reviewer.review, token)
                self._down = (0.0, "")
                return review
            except ReviewUnavailable as exc:
                if attempt == self._policy.review_attempts:
                    why = f"{exc} ({attempt} attempts)"
                    self._down = (self._clock() + self._policy.outage_s, f"{why}; not asked again for "
                                  f"{self._policy.outage_s:g} s")
                    log.warning("%s; TokenReviews fail at once for %.0f s", why, self._policy.outage_s)
                    return why
                log.warning("%s; retrying in %.1f s", exc, delay)
                await self._sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def header_value(headers: Any, name: str) -> bytes | None:
    """The value of header `name` in Kafka headers given as a mapping or as (name, value) pairs."""
    if not headers:
        return None
    items: Iterable[tuple[Any, Any]] = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if (key.decode() if isinstance(key, bytes) else key) == name and value:
            return bytes(value) if not isinstance(value, str) else value.encode()
    return None


def build_gate(settings: Any) -> NodeIdentityGate:
    """The gate the stream worker uses, from its settings."""
    reviewer = KubeTokenReviewer(settings.node_identity_audience, settings.node_identity_kubeconfig)
    policy = GatePolicy(refused_ttl_s=settings.node_identity_refused_ttl_s)
    return NodeIdentityGate(reviewer, account=settings.node_identity_account,
                            audience=settings.node_identity_audience, policy=policy,
                            cache_size=settings.node_identity_cache_size)
