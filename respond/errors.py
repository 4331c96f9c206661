"""The responder's error vocabulary, for cluster actions and sinks alike, and keeping secrets out of error text.

- `TemporaryError`: a later attempt may succeed (HTTP 429 and 5xx, connection failures, timeouts);
  not before `retry_after` seconds when the service said so.
- `AmbiguousError`: a `TemporaryError` after which the request may have been carried out (a
  timeout after sending): look before repeating it.
- `PermanentError`: retrying will not help (forbidden, not found, invalid); the message is the
  service's own (e.g. Jira's `errorMessages` and `errors`).
- `Fenced`: a cluster write this replica did not send, because it no longer holds the Lease it
  last renewed (`respond.leader`): never retried in place; the leader (this replica again, or the
  one that took over) tries it later.

Adapters translate their library's exceptions into these (`cordon.kube_nodes` for Kubernetes,
`sinks.jira.tracker` for Jira, `sinks.slack.transport` for Slack); everything else catches only these.
"""

from __future__ import annotations

from collections.abc import Iterable

from models.redact import REDACTED, redact


class ActionError(Exception):
    """An action (on the cluster, a tracker or a chat) that could not be carried out.

    `status` is the HTTP status when there was one; `fields` the request fields the service named
    in its error (Jira's "errors" keys); `defer` asks the caller not to retry in place but to leave
    it to its queue."""

    retryable = False

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None,
                 fields: tuple[str, ...] = (), defer: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.fields = fields
        self.defer = defer


class TemporaryError(ActionError):
    """A later attempt may succeed (not before `retry_after` seconds, when set)."""

    retryable = True


class AmbiguousError(TemporaryError):
    """The request may have been carried out (a timeout after sending): check before repeating it."""


class PermanentError(ActionError):
    """Retrying will not help (forbidden, not found, invalid)."""


class Fenced(ActionError):
    """The write was not sent: this replica may not write now (`models.leader_election.may_write` says why).
    Retryable by whoever leads next, not in place."""

    retryable = True


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` without the given secret values and without anything else that looks secret."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return redact(text)
