"""The dead letter: an input message that cannot be handled, kept on its topic's `.dlq` twin with
the reason and the original bytes, so someone can inspect it and replay it.

One format for every deployable that consumes a topic (the stream worker's node topics, the
responder's actions topic). The value is JSON:

    {"reason": "undecodable", "error": "...", "topic": "xidpipe.node.kernel", "partition": 3,
     "offset": 1042, "dead_lettered_at": "2026-11-25T15:26:51.120000+00:00",
     "key_b64": "...", "value_b64": "..."}

`key_b64` and `value_b64` are the original key and value (base64; null when the message had none).
The dead letter is keyed by the original key, and its headers repeat the reason and where the
message came from (`xidpipe-dlq-reason`, `-topic`, `-partition`, `-offset`), so a consumer can
filter without decoding the value.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

ERROR_MAX_CHARS = 2000  # an error is cut to this many characters: a dead letter stays one small message
HEADER_PREFIX = "xidpipe-dlq-"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """An input message that cannot be handled: why (`reason`, a short code; `error`, the detail),
    where it was read (`topic`, `partition`, `offset`), its original `key` and `value`, and when it was
    found dead (`at`, timezone-aware)."""

    reason: str
    error: str
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    at: datetime

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            raise ValueError("a dead letter's time is timezone-aware")
        if len(self.error) > ERROR_MAX_CHARS:
            object.__setattr__(self, "error", self.error[:ERROR_MAX_CHARS])

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "reason": self.reason,
            "error": self.error,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "dead_lettered_at": self.at.isoformat(),
            "key_b64": _b64(self.key),
            "value_b64": _b64(self.value),
        }
        return json.dumps(body).encode()

    def headers(self) -> list[tuple[str, bytes]]:
        return [
            (f"{HEADER_PREFIX}reason", self.reason.encode()),
            (f"{HEADER_PREFIX}topic", self.topic.encode()),
            (f"{HEADER_PREFIX}partition", str(self.partition).encode()),
            (f"{HEADER_PREFIX}offset", str(self.offset).encode()),
        ]

    @classmethod
    def from_json(cls, value: bytes) -> DeadLetter:
        """The dead letter a `to_json` value holds (ValueError when it holds none)."""
        try:
            body = json.loads(value)
            return cls(reason=str(body["reason"]), error=str(body["error"]), topic=str(body["topic"]),
                       partition=int(body["partition"]), offset=int(body["offset"]), key=_unb64(body["key_b64"]),
                       value=_unb64(body["value_b64"]), at=datetime.fromisoformat(body["dead_lettered_at"]))
        except (KeyError, TypeError, binascii.Error) as exc:
            raise ValueError(f"not a dead letter: {type(exc).__name__}: {exc}") from None


def _b64(data: bytes | None) -> str | None:
    return base64.b64encode(data).decode() if data is not None else None


def _unb64(text: str | None) -> bytes | None:
    return base64.b64decode(text, validate=True) if text is not None else None
