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
