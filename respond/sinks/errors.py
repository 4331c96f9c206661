"""The sinks' error vocabulary, and keeping secrets out of error text.

`TransientError` (429, 5xx, connection failures, timeouts: try again later, not before
`retry_after` seconds when the service said so) and `PermanentError` (any other 4xx: retrying
will not help; the message is the service's own, e.g. Jira's `errorMessages` and `errors`).
"""

from __future__ import annotations

from collections.abc import Iterable

from models.redact import REDACTED, redact


class SinkError(Exception):
    retryable = False

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None,
                 fields: tuple[str, ...] = (), defer: bool = False) -> None:
        super().__init__(message)
        self.defer = defer  # do not retry in place: leave it to the queue
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.fields = fields  # the request fields the service named in its error (Jira's "errors" keys)


class TransientError(SinkError):
    retryable = True


class AmbiguousError(TransientError):
    """The request may have been carried out (a timeout after sending): check before repeating it."""


class PermanentError(SinkError):
    pass


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` without the given secret values and without anything else that looks secret."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return redact(text)
