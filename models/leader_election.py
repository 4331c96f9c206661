"""Leader election over a `coordination.k8s.io/v1` Lease: the timing decisions, pure.

The semantics are client-go's (`k8s.io/client-go/tools/leaderelection`):

- A candidate reads the Lease every `retry_period_s`. It may take the Lease only when nobody holds
  it (an empty `holderIdentity`: released) or when the record it last saw has not changed for
  `lease_duration_s`, measured on the candidate's own monotonic clock from the moment it saw that
  record. Clocks of different machines are never compared: `renewTime` is informative only.
- The leader renews every `retry_period_s`. Each write is guarded by the Lease's `resourceVersion`
  (optimistic concurrency): of two writers of the same version, one gets a conflict and loses.
- Fencing: a leader whose last successful renewal *started* more than `renew_deadline_s` ago stops
  acting. A standby can take over only `lease_duration_s` after it *saw* that renewal, which is later
  than the renewal started, so the old leader has stopped at least `lease_duration_s -
  renew_deadline_s` before anyone else may start (clock rates, not clocks, must agree).
- On a clean shutdown the leader releases the Lease (empty holder, duration 1 s), so a standby
  takes over at its next read instead of a lease duration later.
- Before every cluster write the leader reads the Lease again (`may_write`): the write is sent only
  while the Lease names this replica at the version its own last renewal wrote, and that renewal
  started less than `renew_deadline_s` ago. A takeover (another holder, or any other write of the
  Lease) refuses the next write at once, without waiting for the renewal to notice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LeaseTimings(BaseModel):
    """The election's durations, in seconds (client-go's defaults for its controllers: 15, 10, 2)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lease_duration_s: float = Field(
        default=15.0, ge=1, description="how long a standby waits after the last renewal it saw before taking "
        "over: the longest time nothing acts after a leader dies without releasing")
    renew_deadline_s: float = Field(
        default=10.0, gt=0, description="a leader that has not renewed for this long stops acting (fencing); "
        "lease_duration_s - renew_deadline_s is the margin for work already in flight to end")
    retry_period_s: float = Field(
        default=2.0, gt=0, description="how often the leader renews and a standby reads the Lease")

    @property
    def margin_s(self) -> float:
        """How long after a leader's fence (its renew deadline) a standby may take over at the earliest:
        the time work already in flight, a cluster write included, has to end."""
        return self.lease_duration_s - self.renew_deadline_s

    @model_validator(mode="after")
    def _ordered(self) -> LeaseTimings:
        if not self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("renew_deadline_s must be shorter than lease_duration_s (fencing before takeover)")
        if not self.retry_period_s < self.renew_deadline_s:
            raise ValueError("retry_period_s must be shorter than renew_deadline_s (several renewals per deadline)")
        return self


class LeaseRecord(BaseModel):
    """What a Lease's spec says (None: the Lease does not exist yet)."""

    model_config = ConfigDict(frozen=True)

    holder: str = ""
    lease_duration_s: int = 0
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0


class Observation(BaseModel):
    """A candidate's memory of the Lease: the record it last saw, its version, and when (monotonic s)
    that record last changed as far as this candidate can tell."""

    model_config = ConfigDict(frozen=True)

    record: LeaseRecord | None = None
    resource_version: str | None = None
    seen_at: float = 0.0


def observe(previous: Observation | None, record: LeaseRecord | None, resource_version: str | None,
            now: float) -> Observation:
    """The candidate's memory after reading the Lease at `now`: the clock restarts whenever the record
    (its holder or renewal) changed, as client-go compares the whole record."""
    if previous is not None and previous.record == record and previous.resource_version == resource_version:
        return previous
    return Observation(record=record, resource_version=resource_version, seen_at=now)


StepKind = Literal["create", "renew", "take", "wait"]


class ElectionStep(BaseModel):
    """What a candidate does after reading the Lease, and why."""

    model_config = ConfigDict(frozen=True)

    kind: StepKind
    reason: str


def decide_step(seen: Observation, identity: str, now: float, timings: LeaseTimings) -> ElectionStep:
    """Create a missing Lease, renew our own, take a released or expired one, or wait."""
    record = seen.record
    if record is None:
        return ElectionStep(kind="create", reason="no Lease yet: creating it as its holder")
    if record.holder == identity:
        return ElectionStep(kind="renew", reason="we hold the Lease: renewing it")
    if not record.holder:
        return ElectionStep(kind="take", reason="the Lease was released: taking it")
    duration = record.lease_duration_s if record.lease_duration_s > 0 else timings.lease_duration_s
    waited = now - seen.seen_at
    if waited >= duration:
        return ElectionStep(kind="take", reason=f"{record.holder} has not renewed for {waited:.1f} s "
                                                f"(lease {duration:g} s): taking over")
    return ElectionStep(kind="wait", reason=f"held by {record.holder}; expires in {duration - waited:.1f} s "
                                            "unless renewed")


def claimed(record: LeaseRecord | None, identity: str, at: datetime, timings: LeaseTimings) -> LeaseRecord:
    """The record a candidate writes to create, take or renew the Lease: a new holder counts a
    transition and a new acquire time; a renewal keeps both."""
    ours = record is not None and record.holder == identity
    return LeaseRecord(
        holder=identity, lease_duration_s=max(1, round(timings.lease_duration_s)),
        acquire_time=record.acquire_time if ours and record is not None else at, renew_time=at,
        transitions=(record.transitions if record is not None else 0) + (0 if ours or record is None else 1),
    )


def released(record: LeaseRecord, at: datetime) -> LeaseRecord:
    """The record a leader writes when it steps down cleanly (client-go: empty holder, 1 s duration)."""
    return record.model_copy(update={"holder": "", "lease_duration_s": 1, "renew_time": at})


def fenced(renew_started_at: float, now: float, timings: LeaseTimings) -> bool:
    """Whether a leader must stop acting: its last successful renewal started `renew_deadline_s` ago
    or more (monotonic seconds)."""
    return now - renew_started_at >= timings.renew_deadline_s


class WriteVerdict(BaseModel):
    """Whether a leader may send a cluster write now, and why."""

    model_config = ConfigDict(frozen=True)

    allowed: bool
    reason: str


def may_write(identity: str, renewed_version: str | None, renewed_at: float | None, current: LeaseRecord | None,
              current_version: str | None, now: float, timings: LeaseTimings) -> WriteVerdict:
    """The fence before a cluster write: allowed only while the Lease as just read (`current` at
    `current_version`) is the one this replica's last renewal wrote (`renewed_version`, a renewal that
    started at `renewed_at`, monotonic s) and that renewal's deadline has not passed at `now`."""
    if renewed_at is None or renewed_version is None:
        return WriteVerdict(allowed=False, reason=f"{identity} has not renewed the Lease: not the leader")
    age = now - renewed_at
    if fenced(renewed_at, now, timings):
        return WriteVerdict(allowed=False, reason=f"the renew deadline passed: the last renewal started {age:.1f} s "
                                                  f"ago (deadline {timings.renew_deadline_s:g} s)")
    if current is None:
        return WriteVerdict(allowed=False, reason="there is no Lease any more")
    if current.holder != identity:
        who = f"held by {current.holder}" if current.holder else "released"
        return WriteVerdict(allowed=False, reason=f"the Lease is {who}, not {identity}")
    if current_version != renewed_version:
        return WriteVerdict(allowed=False, reason=f"the Lease is at version {current_version}, not the version "
                                                  f"{renewed_version} of {identity}'s last renewal: written since")
    return WriteVerdict(allowed=True, reason=f"{identity} holds the Lease at version {current_version}, renewed "
                                             f"{age:.1f} s ago (deadline {timings.renew_deadline_s:g} s)")
