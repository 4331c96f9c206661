"""The cordon lane: each offer of an incident's cordon is decided afresh, from the incident's current
row, its occurrence times and its pods, by the one cordon decision (`models.cordon.decide_cordon`
through the executor), and what is left pending is kept and offered again.

- The request (`history.cordon_inputs.cordon_request`, which `xidpipe replay` asks too) carries the
  occurrence times of the incident's component within the policy's longest window, so the policy's
  `cordon_after` windows count faults, not sensor reports, across a quiet period; and its pods, so
  the GPU-scoped drain evicts them.
- Refused by the policy: recorded (the action record), nothing pending; the next change is offered again.
- A retryable failure: kept as a pending retry with exponential backoff (`models.cordon_retry`) and
  tried again by `run` until it succeeds or the incident ends (resolved, or taken over by people).
- Held by the breaker: kept, and offered again by `run` once the breaker is no longer tripped
  (`xidpipe breaker reset`).

Nothing here waits on a dossier, cluster evidence, a ticket or a chat call: the responder refreshes
the ticket in its own lane after the cordon (`after`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.cordon_inputs import cordon_request
from history.tables import Incident
from models.cordon import CordonRequest
from models.cordon_retry import CordonFollowup, RetryBackoff, cordon_followup, incident_ended
from respond.cordon.executor import ActionResult, CordonExecutor, Decided
from respond.cordon.pending import PendingCordon, PendingCordons
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)



def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Decided:
    """An offer between its decision and its completion (`CordonLane.offer_many`)."""

    incident_id: str
    request_key: str | None
    node: str
    ended: str | None
    previous: PendingCordon | None
    decided: Decided | None


@dataclass(frozen=True, slots=True)
class CordonOffer:
    """One offer of an incident's cordon: the executor's result (None when the incident had ended) and
    what is left pending."""

    incident_id: str
    result: ActionResult | None
    followup: CordonFollowup
    request_key: str | None = None


class CordonLane:
    def __init__(self, engine: sa.Engine, executor: CordonExecutor, *, backoff: RetryBackoff | None = None,
                 clock: Callable[[], datetime] = utcnow,
                 after: Callable[[CordonOffer], Awaitable[None]] | None = None,
                 metrics: ResponderMetrics | None = None) -> None:
        self.engine = engine
        self.metrics = metrics
        self.executor = executor
        self.backoff = backoff or RetryBackoff()
        self.clock = clock
        self.after = after
        self.pending = PendingCordons(engine)

    async def offer(self, incident_id: str, request_key: str | None = None) -> CordonOffer:
        """Decide and act on the incident's cordon now; LookupError when the incident is not in the database."""
        (offer,) = await self.offer_many([(incident_id, request_key)])
        if isinstance(offer, LookupError):
            raise offer
        return offer

    async def offer_many(self, offers: Sequence[tuple[str, str | None]]) -> list[CordonOffer | LookupError]:
        """Offer several incidents' cordons (incident id, request key), in order: every one decided (its
        node read, decided, written and recorded: `CordonExecutor.decide`) before any is completed (its
        condition, Event and drain, its follow-up). In a burst of cordons the last node is unschedulable
        after the burst's decisions alone. Per offer, its result or the LookupError of an incident not
        in the database."""
        decided: list[_Decided | LookupError] = []
        for incident_id, request_key in offers:
            loaded = await asyncio.to_thread(self._request, incident_id)
            if loaded is None:
                decided.append(LookupError(f"incident {incident_id} is not in the database"))
                continue
            node, req, ended = loaded
            previous = await asyncio.to_thread(self.pending.get, incident_id)
            first = None if req is None else await asyncio.to_thread(self.executor.decide, req)
            decided.append(_Decided(incident_id, request_key, node, ended, previous, first))
        out: list[CordonOffer | LookupError] = []
        for d in decided:
            if isinstance(d, LookupError):
                out.append(d)
                continue
            result = None if d.decided is None else await asyncio.to_thread(self.executor.complete, d.decided)
            out.append(await self._settle(d, result))
        return out

    async def _settle(self, d: _Decided, result: ActionResult | None) -> CordonOffer:
        """What is left pending of an offer, and the `after` callback."""
        incident_id, request_key, node, ended, previous = d.incident_id, d.request_key, d.node, d.ended, d.previous
        followup = cordon_followup(
            ended=ended, outcome=result.outcome if result else "skipped", decision=result.decision if result else None,
            retryable=result.retryable if result else False, dry_run=result.dry_run if result else False,
            attempts=previous.attempts if previous is not None and previous.kind == "retry" else 0,
            now=self.clock(), backoff=self.backoff, reason=result.reason if result else "",
        )
        if previous is not None or followup.kind != "settled":
            await asyncio.to_thread(self.pending.settle, incident_id, node, followup, self.clock())
        if followup.kind != "settled":
            log.warning("cordon for %s pending: %s", incident_id, followup.reason,
                        extra={"incident": incident_id, "node": node, "pending": followup.kind})
        offer = CordonOffer(incident_id, result, followup, request_key)
        if self.after is not None:
            await self.after(offer)
        return offer

    def _request(self, incident_id: str) -> tuple[str, CordonRequest | None, str | None] | None:
        """The incident's node, and its cordon request as it stands now, or why its cordon is no longer
        wanted (then no request: an incident merged into another has no faults left to count)."""
        with Session(self.engine) as s:
            row = s.get(Incident, incident_id)
            if row is None:
                return None
            ended = incident_ended(row.status, row.lifecycle)
            if ended is not None:
                return row.node, None, ended
            return row.node, cordon_request(s, row, self.executor.policy.longest_window_s()), None

    async def tick(self) -> list[CordonOffer]:
        """Offer again what is due: every cordon held by the breaker once it is no longer tripped, and
        the retries whose time has come."""
        offers: list[CordonOffer] = []
        breaker = await asyncio.to_thread(self.executor.breaker_status)
        if self.metrics is not None:
            await asyncio.to_thread(self._gauges, breaker.tripped)
        if not breaker.tripped:
            for held in await asyncio.to_thread(self.pending.held):
                log.info("breaker reset: offering the held cordon of %s again", held.incident_id,
                         extra={"incident": held.incident_id, "node": held.node})
                offers.append(await self._again(held.incident_id))
                if (await asyncio.to_thread(self.executor.breaker_status)).tripped:
                    break  # tripped again: the rest stay held
        for due in await asyncio.to_thread(self.pending.due, self.clock()):
            offers.append(await self._again(due.incident_id))
        return offers

    def _gauges(self, tripped: bool) -> None:
        assert self.metrics is not None
        self.metrics.breaker_tripped.set(1 if tripped else 0)
        kinds = [p.kind for p in self.pending.all()]
        for kind in ("retry", "breaker"):
            self.metrics.cordons_pending.labels(kind).set(kinds.count(kind))

    async def _again(self, incident_id: str) -> CordonOffer:
        try:
            return await self.offer(incident_id)
        except LookupError as exc:  # the incident is gone (its history pruned): nothing left to cordon
            followup = CordonFollowup(kind="settled", reason=str(exc))
            await asyncio.to_thread(self.pending.settle, incident_id, "", followup)
            return CordonOffer(incident_id, None, followup)

    async def run(self, stop: asyncio.Event, interval_s: float = 1.0) -> None:
        """`tick` every `interval_s` until `stop` is set."""
        while not stop.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("pending cordons: pass failed; retrying in %.1f s", interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
