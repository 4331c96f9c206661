"""Node identity: may this record speak for the node it names?

The agent sends, in the Kafka header `xidpipe-node-token`, the projected ServiceAccount token the
kubelet mounts into its pod: audience-bound (`xidpipe`), short-lived, bound to the pod, and since
Kubernetes 1.32 carrying the pod's node in its claims. The worker asks the kube-apiserver to review
the token (TokenReview) and `judge`s the answer against the record's key (its node): a record is
accepted only when the token is valid for our audience, belongs to the agent's ServiceAccount, and
names the same node. A node whose agent is compromised can then still lie about itself, but never
about another node.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

TOKEN_HEADER = "xidpipe-node-token"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
DEFAULT_AUDIENCE = "xidpipe"
DEFAULT_AGENT_ACCOUNT = "system:serviceaccount:xidpipe:xidpipe-agent"


@dataclass(frozen=True, slots=True)
class TokenReview:
    """What the kube-apiserver said about a token."""

    authenticated: bool
    username: str = ""
    node: str | None = None  # from the token's pod binding (user.extra node-name)
    audiences: tuple[str, ...] = ()
    error: str = ""  # the API server's reason when not authenticated


@dataclass(frozen=True, slots=True)
class IdentityVerdict:
    accepted: bool
    # verified | invalid_key | missing_token | invalid_token | wrong_audience | wrong_account | no_node_claim
    # | node_mismatch
    reason: str
    detail: str = ""


def judge(key_node: str | None, review: TokenReview | None, *, account: str, audience: str) -> IdentityVerdict:
    """Accept a record keyed `key_node` that came with a token reviewed as `review` (None: no token).

    `key_node` is the node the record's key names (`models.topics.key_node`), None when the key names
    none (no key, or one such as `node-a/../node-b`): such a record is refused whatever its token."""
    if key_node is None:
        return IdentityVerdict(False, "invalid_key", "the record's key names no node (`<node>` or `<node>/<kind>`)")
    if review is None:
        return IdentityVerdict(False, "missing_token", f"no {TOKEN_HEADER} header")
    if not review.authenticated:
        return IdentityVerdict(False, "invalid_token", review.error or "the API server did not authenticate it")
    if audience not in review.audiences:
        return IdentityVerdict(False, "wrong_audience", f"token audiences {list(review.audiences)}, want {audience}")
    if review.username != account:
        return IdentityVerdict(False, "wrong_account", f"token of {review.username}, want {account}")
    if not review.node:
        return IdentityVerdict(False, "no_node_claim", "the token is not bound to a pod on a node")
    if key_node != review.node:
        return IdentityVerdict(False, "node_mismatch", f"record for node {key_node!r} signed by node {review.node!r}")
    return IdentityVerdict(True, "verified", review.node)


def token_expiry(token: str) -> float | None:
    """The `exp` claim (epoch seconds) of a JWT, read without verifying it: only for how long a review
    of this token, done by the API server, may be reused. None when it has none or is no JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, binascii.Error):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """How the worker's identity gate spends TokenReviews, and for how long it trusts one.

    Defaults and why:
    - `reviews_in_flight` 16: a batch's reviews run side by side, so 400 forged tokens cost 25 round
      trips (about 0.1 s against a local API server), not 400; 16 stays far below the API server's
      default 400 mutating requests in flight.
    - `verified_ttl_s` 120: a review that accepted a token is reused at most this long (and never past
      the token's `exp`), so the token of a deleted agent pod stops working within 2 minutes. It
      costs one review per active node per 2 minutes (10,000 nodes: 83 reviews/s, shared by the workers).
    - `refused_ttl_s` 30: a refused token's review is reused this long: a flood of one forged token
      costs one review per 30 s.
    - `park_after` 5 refusals within `park_window_s` 60 park the node a record's key names for
      `park_s` 60: while parked, its records with a token never verified are refused without a
      review (`parked`); tokens it had verified pass (reviewed again when stale), so a flood keyed
      for one node costs at most `park_after` + `reviews_in_flight` reviews a minute.
    - `review_attempts` 3 (backoff 0.5 s, then 1 s): an API server that cannot answer (unreachable,
      throttling 429, 5xx, our own rights) is asked again twice; then it is not asked for `outage_s`
      10, and meanwhile a token verified before is judged on its last review until the token expires
      (an API server outage does not stop the fleet), any other record is refused (`unavailable`, to
      the dead-letter topic with the error) instead of holding every node's records.
    """

    reviews_in_flight: int = 16
    verified_ttl_s: float = 120.0
    refused_ttl_s: float = 30.0
    park_after: int = 5
    park_window_s: float = 60.0
    park_s: float = 60.0
    review_attempts: int = 3
    retry_delay_s: float = 0.5
    outage_s: float = 10.0
    max_nodes: int = 20_000  # nodes whose recent refusals are remembered (the oldest forgotten first)


def review_fresh_until(review: TokenReview, token: str, now: float, policy: GatePolicy) -> float:
    """Until when `review` of `token`, made at `now`, may be reused without asking the API server again."""
    if not review.authenticated:
        return now + policy.refused_ttl_s
    expires = token_expiry(token)
    until = now + policy.verified_ttl_s
    return min(until, expires) if expires is not None else until


class Parking:
    """Which nodes are parked: those whose records were refused `park_after` times within
    `park_window_s`, each for `park_s` after the refusal that parked it. Pure: times are given."""

    def __init__(self, policy: GatePolicy) -> None:
        self._policy = policy
        self._refusals: dict[str, list[float]] = {}
        self._parked: dict[str, float] = {}  # node -> parked until

    def parked_until(self, node: str, now: float) -> float | None:
        until = self._parked.get(node)
        if until is not None and until <= now:
            del self._parked[node]
            return None
        return until

    def refused(self, node: str, now: float) -> bool:
        """Note a refused record of `node` at `now`; True when this parks it."""
        p = self._policy
        times = [t for t in self._refusals.pop(node, []) if t > now - p.park_window_s] + [now]
        self._refusals[node] = times[-p.park_after:]
        while len(self._refusals) > p.max_nodes:
            self._refusals.pop(next(iter(self._refusals)))
        if len(times) < p.park_after or self.parked_until(node, now) is not None:
            return False
        self._parked[node] = now + p.park_s
        while len(self._parked) > p.max_nodes:
            self._parked.pop(next(iter(self._parked)))
        return True
