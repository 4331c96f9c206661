"""Leader election for the responder's replicas: only the holder of one Lease acts.

`LeaderElector` runs client-go's loop over a `LeasePort` (`respond.lease_kube.KubeLease` on the
Kubernetes API); the timing decisions are `models.leader_election`'s. `run_elected` runs the work
(the responder's consume-and-act loop) only while this replica leads:

- a standby reads the Lease every retry period and takes it once it was released or has not been
  renewed for a lease duration (as this replica's monotonic clock saw it);
- the leader renews every retry period; when a renewal has not succeeded within the renew deadline
  (API server unreachable, or another holder), the work's stop event is set at once (fencing), and
  the replica becomes a standby again once the work has stopped. Work that does not stop within
  `lease_duration_s - renew_deadline_s` raises `LeadershipLost`: the process must exit, so nothing
  it still runs can act after another replica took over;
- on a clean stop the work stops first, then the Lease is released, and a standby takes over at its
  next read.

`LeaderElector.check_write` is the fence before each cluster write (`respond.cordon.kube_nodes`
calls it right before every write it sends, each attempt): it reads the Lease and allows the write
only while the Lease is still the one this replica's last renewal wrote, within the renew deadline
(`models.leader_election.may_write`). It waits for a renewal in flight, so its own renewal never
looks like another writer.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from models.leader_election import (
    LeaseRecord,
    LeaseTimings,
    Observation,
    WriteVerdict,
    claimed,
    decide_step,
    fenced,
    may_write,
    observe,
    released,
)
from respond.errors import ActionError

log = logging.getLogger(__name__)


class LeaseConflict(Exception):
    """Another candidate wrote the Lease first (a stale resourceVersion, or a create that lost)."""


class LeadershipLost(Exception):
    """Fenced, and the work did not stop within the margin before another replica may take over."""


@dataclass(frozen=True, slots=True)
class LeaseRead:
    record: LeaseRecord
    resource_version: str


class LeasePort(Protocol):
    def get(self) -> LeaseRead | None: ...

    def create(self, record: LeaseRecord) -> LeaseRead: ...

    def update(self, resource_version: str, record: LeaseRecord) -> LeaseRead: ...


def utcnow() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    def __init__(self, lease: LeasePort, identity: str, timings: LeaseTimings | None = None, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], datetime] = utcnow) -> None:
        if not identity:
            raise ValueError("a candidate needs an identity (the pod name)")
        self.lease = lease
        self.identity = identity
        self.timings = timings or LeaseTimings()
        self.clock = clock
        self.wall = wall
        self.seen: Observation | None = None
        self.renewed_at: float | None = None  # when the last successful write started (monotonic s)
        self.renewed_version: str | None = None  # the Lease's resourceVersion that write left
        self._writing = threading.Lock()  # a renewal's write and its bookkeeping; a write check waits on it
        # The versions this term's latest renewals left: a write check's read may return any of them.
        self._own_versions: collections.deque[str] = collections.deque(maxlen=16)

    @property
    def leading(self) -> bool:
        return self.renewed_at is not None and not fenced(self.renewed_at, self.clock(), self.timings)

    def try_acquire_or_renew(self) -> bool:
        """One round (blocking: call it in a thread): read the Lease, then create, take or renew it as
        `models.leader_election.decide_step` says. True when we hold it afterwards."""
        started = self.clock()
        current = self.lease.get()
        before = self.seen.record.holder if self.seen is not None and self.seen.record is not None else None
        self.seen = observe(self.seen, current.record if current else None,
                            current.resource_version if current else None, started)
        step = decide_step(self.seen, self.identity, self.clock(), self.timings)
        if step.kind == "wait":
            new_holder = current is not None and current.record.holder != before
            log.log(logging.INFO if new_holder else logging.DEBUG, "leader election: %s is a standby: %s",
                    self.identity, step.reason, extra={"identity": self.identity})
            return False
        record = claimed(current.record if current else None, self.identity, self.wall(), self.timings)
        with self._writing:
            try:
                written = (self.lease.create(record) if current is None
                           else self.lease.update(current.resource_version, record))
            except LeaseConflict as exc:
                log.info("leader election: %s", exc, extra={"identity": self.identity})
                return False
            self.seen = observe(self.seen, written.record, written.resource_version, self.clock())
            if self.renewed_at is None:
                log.warning("leader election: %s is the leader now (%s)", self.identity, step.reason,
                            extra={"identity": self.identity, "transitions": written.record.transitions})
            self.renewed_at, self.renewed_version = started, written.resource_version
            self._own_versions.append(written.resource_version)
        return True

    def check_write(self) -> WriteVerdict:
        """The fence before a cluster write (blocking: the writer's thread calls it): read the Lease now
        and decide (`models.leader_election.may_write`). The read is this replica's own when its version
        is one that its renewals of this term left: the read is a consistent one, so the Lease was ours
        when it was read, even when a renewal moved it on meanwhile (that renewal's bookkeeping is waited
        for, up to the renew deadline). A failed read raises the Lease port's error (`respond.errors`)."""
        if self.renewed_at is None:
            return may_write(self.identity, None, None, None, None, self.clock(), self.timings)
        current = self.lease.get()
        renewed_at = self.renewed_at
        wait = 0.0 if renewed_at is None else max(0.0, renewed_at + self.timings.renew_deadline_s - self.clock())
        if not self._writing.acquire(timeout=wait):
            return WriteVerdict(allowed=False, reason="a renewal was still being written at the renew deadline")
        try:
            version, renewed_at, own = self.renewed_version, self.renewed_at, set(self._own_versions)
        finally:
            self._writing.release()
        read = current.resource_version if current else None
        return may_write(self.identity, read if read in own else version, renewed_at,
                         current.record if current else None, read, self.clock(), self.timings)

    def _step_down(self) -> None:
        # Not under `_writing`: a renewal stuck in its write must not block the event loop that calls this.
        self.renewed_at, self.renewed_version = None, None
        self._own_versions.clear()

    async def _round(self, timeout_s: float) -> bool:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.try_acquire_or_renew), max(0.05, timeout_s))
        except (ActionError, TimeoutError) as exc:
            log.warning("leader election: Lease unavailable: %s", exc or "timed out",
                        extra={"identity": self.identity})
            return False

    async def acquire(self, stop: asyncio.Event) -> bool:
        """Wait until this replica leads (True) or `stop` is set (False)."""
        while not stop.is_set():
            if await self._round(self.timings.retry_period_s):
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.timings.retry_period_s)
        return False

    async def keep(self, lost: asyncio.Event) -> None:
        """Renew every retry period until `lost` is set by others, or set it when fenced."""
        while not lost.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lost.wait(), self.timings.retry_period_s)
            if lost.is_set():
                return
            assert self.renewed_at is not None
            left = self.renewed_at + self.timings.renew_deadline_s - self.clock()
            renewed = await self._round(min(self.timings.retry_period_s, left)) if left > 0 else False
            if not renewed and self.renewed_at is not None and fenced(self.renewed_at, self.clock(), self.timings):
                log.error("leader election: %s could not renew within %g s: stopping its work",
                          self.identity, self.timings.renew_deadline_s, extra={"identity": self.identity})
                self._step_down()
                lost.set()
            elif not renewed and self.seen is not None and self.seen.record is not None \
                    and self.seen.record.holder not in ("", self.identity):
                log.error("leader election: the Lease is held by %s: stopping the work of %s",
                          self.seen.record.holder, self.identity, extra={"identity": self.identity})
                self._step_down()
                lost.set()

    def release(self) -> bool:
        """Step down (blocking): write the released record if we still hold the Lease."""
        self._step_down()
        current = self.lease.get()
        if current is None or current.record.holder != self.identity:
            return False
        try:
            self.lease.update(current.resource_version, released(current.record, self.wall()))
        except LeaseConflict:
            return False
        log.warning("leader election: %s released the Lease", self.identity, extra={"identity": self.identity})
        return True


Work = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


async def run_elected(elector: LeaderElector, work: Work, stop: asyncio.Event) -> None:
    """Run `work(its_stop)` whenever this replica leads, until `stop` is set; release on the way out."""
    margin = elector.timings.margin_s
    while not stop.is_set():
        if not await elector.acquire(stop):
            return
        lost = asyncio.Event()
        keeper = asyncio.create_task(elector.keep(lost))
        relay = asyncio.create_task(_relay(stop, lost))
        task = asyncio.create_task(work(lost))
        try:
            await asyncio.wait({task, keeper}, return_when=asyncio.FIRST_COMPLETED)
            lost.set()
            if not task.done():
                done, _ = await asyncio.wait({task}, timeout=None if stop.is_set() else margin)
                if not done:
                    raise LeadershipLost(f"{elector.identity}: the work did not stop within {margin:g} s of "
                                         "losing the Lease")
            task.result()  # the work's own failure stops the replica (after releasing the Lease)
        finally:
            relay.cancel()
            await asyncio.gather(keeper, relay, return_exceptions=True)
            if task.done() and elector.renewed_at is not None:
                with contextlib.suppress(ActionError, LeaseConflict):
                    await asyncio.to_thread(elector.release)


async def _relay(stop: asyncio.Event, lost: asyncio.Event) -> None:
    await stop.wait()
    lost.set()
