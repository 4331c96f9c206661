"""Versioned incident fingerprints over an explicit field list (volatile values excluded)."""

from __future__ import annotations

import hashlib
from functools import lru_cache

FINGERPRINT_VERSION = 1
FINGERPRINT_FIELDS = ("node", "gpu", "family")


@lru_cache(maxsize=65_536)  # a pure function asked several times per fault: keep the recent answers
def incident_fingerprint(node: str, gpu: str, family: str) -> str:
    """`v1:<16 hex>` over (node, GPU identity, fault family); pids, addresses and times never enter it."""
    payload = "\x1f".join((node, gpu, family)).encode("utf-8")
    return f"v{FINGERPRINT_VERSION}:{hashlib.sha256(payload).hexdigest()[:16]}"
