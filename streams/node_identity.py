"""Node identity on the worker: each node record's token is reviewed by the kube-apiserver
(TokenReview) and judged by `models.node_identity.judge` against the node its key names
(`models.topics.key_node`: a state record's key is `<node>/<kind>`).

Why TokenReview of a projected ServiceAccount token: the kubelet already gives every agent pod a
short-lived token bound to the pod (and so to its node), refreshed without our help; the API server
that signed it is the only party that needs to hold a key, it refuses a token as soon as its pod is
gone, and the worker needs no key material, only `create tokenreviews`. Signing records with a
per-node key would need a key distribution of our own; mTLS client certificates per node would need
a CA and a Kafka principal per node.

A review is cached per token until the token expires (its `exp`; refused ones for a short while), so
the API server sees about one review per agent pod per token refresh. A TokenReview that fails for
another reason than the token (the API server unreachable, 5xx) is retried with backoff: the batch
waits, nothing is rejected for our own outage.

This is the only module of `streams` that imports `kubernetes` (an import-linter contract).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from models.node_identity import (
    NODE_NAME_EXTRA,
    TOKEN_HEADER,
    IdentityVerdict,
    TokenReview,
    judge,
    token_expiry,
)
from models.topics import key_node

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES = 16 * 1024
REVIEW_TIMEOUT_S = 10.0
RETRY_MAX_S = 30.0


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
    """Judges node records by their token header; counts what it refused, by reason."""

    def __init__(self, reviewer: Reviewer, *, account: str, audience: str, cache_size: int = 20_000,
                 refused_ttl_s: float = 30.0, clock: Any = time.time) -> None:
        self._reviewer = reviewer
        self._account = account
        self._audience = audience
        self._cache: OrderedDict[bytes, tuple[float, TokenReview]] = OrderedDict()
        self._cache_size = cache_size
        self._refused_ttl_s = refused_ttl_s
        self._clock = clock
        self.refused: Counter[str] = Counter()
        self.reviews = 0  # TokenReviews sent (cache misses)

    async def check(self, key: bytes | None, headers: Any) -> IdentityVerdict:
        named = key_node(key) if key is not None else None
        node = named.decode("ascii") if named is not None else None
        token = header_value(headers, TOKEN_HEADER)
        review = None if token is None or node is None else await self._review(token)
        verdict = judge(node, review, account=self._account, audience=self._audience)
        if not verdict.accepted:
            self.refused[verdict.reason] += 1
        return verdict

    async def _review(self, token: bytes) -> TokenReview:
        if len(token) > MAX_TOKEN_BYTES:
            return TokenReview(False, error=f"token longer than {MAX_TOKEN_BYTES} bytes")
        digest = hashlib.sha256(token).digest()
        now = self._clock()
        hit = self._cache.get(digest)
        if hit is not None and hit[0] > now:
            self._cache.move_to_end(digest)
            return hit[1]
        text = token.decode("ascii", "replace")
        review = await self._review_retrying(text)
        expires = token_expiry(text) if review.authenticated else None
        until = min(expires, now + 3600.0) if expires is not None else now + self._refused_ttl_s
        self._cache[digest] = (until, review)
        self._cache.move_to_end(digest)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return review

    async def _review_retrying(self, token: str) -> TokenReview:
        delay = 0.2
        while True:
            try:
                self.reviews += 1
                return await asyncio.to_thread(self._reviewer.review, token)
            except ReviewUnavailable as exc:
                log.warning("%s; retrying in %.1f s (node records wait)", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)


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
    return NodeIdentityGate(reviewer, account=settings.node_identity_account,
                            audience=settings.node_identity_audience,
                            cache_size=settings.node_identity_cache_size,
                            refused_ttl_s=settings.node_identity_refused_ttl_s)
