"""What follows a cordon attempt: retry it later, hold it until the breaker is reset, or nothing.

The responder offers an incident's cordon on every change of the incident (`models.actions.action_requests`)
and decides it with `models.cordon.decide_cordon`. This module decides, purely, whether the attempt
leaves a cordon pending:

- a retryable failure (the API answered 429 or 5xx, or could not be reached, for longer than one
  call's own retries), or a write the fence refused (`fenced`: the replica had lost its Lease; the
  pending retry is in SQL, so the leader that took over tries it), is tried again with exponential
  backoff, until it succeeds or the incident ends;
- a cordon held by the circuit breaker (tripped now, or already open) is remembered and offered
  again once an operator has reset the breaker (`xidpipe breaker reset`);
- anything else settles it: done, already cordoned, or refused by the policy or the scope (the next
  change of the incident is offered again and decided afresh).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from models.lifecycle import BY_PEOPLE
from models.vocabulary import ActionOutcome, CordonOutcome

FollowupKind = Literal["retry", "breaker", "settled"]
BREAKER_DECISIONS = (CordonOutcome.BREAKER_OPEN, CordonOutcome.TRIP_BREAKER)


class RetryBackoff(BaseModel):
    """Exponential backoff between attempts of a cordon that failed as retryable (seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    initial_s: float = Field(default=2.0, gt=0, description="wait before the first retry")
    max_s: float = Field(default=300.0, gt=0, description="longest wait between retries")

    def delay_s(self, attempts: int) -> float:
        """The wait after `attempts` failed attempts (1: the first failure)."""
        return float(min(self.max_s, self.initial_s * 2 ** max(0, min(attempts - 1, 30))))


class CordonFollowup(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FollowupKind
    reason: str
    attempts: int = Field(default=0, ge=0, description="failed attempts so far (retry)")
    due_at: datetime | None = Field(default=None, description="when to try again (retry); when held (breaker)")


def incident_ended(status: str, lifecycle: str) -> str | None:
    """Why an incident's cordon is no longer wanted (resolved, or taken over by people), or None."""
    if status != "open":
        return f"the incident is {status}"
    if lifecycle in BY_PEOPLE:
        return f"the incident is {lifecycle}"
    return None


def cordon_followup(
    *,
    ended: str | None,
    outcome: str,
    decision: str | None,
    retryable: bool,
    dry_run: bool,
    attempts: int,
    now: datetime,
    backoff: RetryBackoff,
    reason: str = "",
) -> CordonFollowup:
    """What follows one attempt (`outcome`, `decision`, `retryable` as the executor reported them);
    `attempts`: failed attempts before this one."""
    if ended is not None:
        return CordonFollowup(kind="settled", reason=f"{ended}: no cordon pending")
    if outcome in (ActionOutcome.FAILED, ActionOutcome.FENCED) and retryable:
        n = attempts + 1
        wait = backoff.delay_s(n)
        return CordonFollowup(kind="retry", attempts=n, due_at=now + timedelta(seconds=wait),
                              reason=f"attempt {n} failed ({reason}); retry in {wait:.0f} s")
    if decision in BREAKER_DECISIONS and not dry_run:
        return CordonFollowup(kind="breaker", due_at=now, reason=f"held by the circuit breaker ({reason}); "
                              "offered again once the breaker is reset")
    if decision == CordonOutcome.NOT_NEEDED:
        return CordonFollowup(kind="settled", reason=f"refused by the policy ({reason}); the incident's next "
                              "change is decided again")
    return CordonFollowup(kind="settled", reason=f"{decision or outcome}: {reason}")
