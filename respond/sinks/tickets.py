"""The ticket sink: decide (`models.ticket_policy`), act through a `TicketTracker`, record in SQL.
One per configured tracker (`fanout.TicketSinks`), each with its own rows, under its name.

Every notice is first written to the sink's `ticket_queue` rows (its latest snapshot per incident),
then handled. A transient failure (429, 5xx, Jira unreachable, a timeout) is retried in place a few
times with backoff, honouring Retry-After. A create that timed out is looked for again only after
`index_settle_s`, once Jira's search index shows what it may have created. If Jira stays
unavailable the row stays `pending` with a next attempt time, and `drain()` (run in a loop by the
responder) picks it up: Jira being down delays tickets, it never loses them. A permanent failure
(another 4xx) marks the row `failed` with Jira's message. Each attempt re-reads the state first
(the map in SQL, else a search on the fingerprint label), so a retried or redelivered notice never
opens a second ticket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Literal

from history.sink_tables import TicketRow
from models.dossier import Dossier, evidence_files, render_json, render_markdown, title
from models.redact import redact
from models.ticket_policy import (
    TicketDecision,
    TicketPolicy,
    TicketState,
    TicketSubject,
    comment_marker,
    decide_ticket,
    fingerprint_label,
    incident_label,
    wants_ticket,
)
from respond.errors import AmbiguousError, PermanentError, TemporaryError
from respond.sinks.content import incident_page
from respond.sinks.model import IncidentNotice
from respond.sinks.ports import TicketBody, TicketInfo, TicketTracker
from respond.sinks.sink_store import SinkStore
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to try before leaving a ticket for the drain loop. Seconds."""

    attempts: int = 3  # tries per handling, each re-reading the state first
    base_s: float = 1.0  # backoff between tries: base, 2·base, 4·base ... (Retry-After wins when longer)
    max_wait_s: float = 30.0  # a longer Retry-After is not waited for in place: the row is retried later
    queue_base_s: float = 30.0  # the drain loop's first retry delay, doubling per failed handling
    queue_max_s: float = 900.0  # and its longest
    index_settle_s: float = 60.0  # after a create that timed out: wait this long for Jira's search index


@dataclass(frozen=True, slots=True)
class TicketOutcome:
    incident_id: str
    status: Literal["done", "pending", "failed"]
    reason: str
    action: str | None = None
    key: str | None = None
    error: str | None = None
    sink: str = ""  # the ticket sink that handled it


def dossier_files(notice: IncidentNotice, incident_url: str | None = None) -> dict[str, bytes]:
    d = with_links(notice.dossier, incident_url)
    return {"dossier.md": render_markdown(d).encode(),
            "dossier.json": (json.dumps(render_json(d), indent=2, sort_keys=True) + "\n").encode(),
            **evidence_files(d)}


def with_links(d: Dossier, incident_url: str | None) -> Dossier:
    return d.model_copy(update={"incident_url": incident_url}) if incident_url else d


class TicketSink:
    """One ticket destination: its tracker, and its own queue and ticket map in `store` (the rows of
    the sink `name`, by default the tracker's name)."""

    def __init__(self, tracker: TicketTracker, store: SinkStore, policy: TicketPolicy | None = None,
                 retry: RetryPolicy | None = None, clock: Callable[[], datetime] = utcnow,
                 sleep: Callable[[float], None] = time.sleep, incident_url_base: str | None = None,
                 metrics: ResponderMetrics | None = None, name: str | None = None) -> None:
        self.incident_url_base = incident_url_base
        self.metrics = metrics
        self.tracker = tracker
        self.name = name or tracker.name
        self.store = store.for_sink(self.name)
        self.policy = policy or TicketPolicy()
        self.retry = retry or RetryPolicy()
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()  # the drain loop and submissions run in different threads

    # --- entry points ------------------------------------------------------------------------------
    def submit(self, notice: IncidentNotice) -> TicketOutcome:
        """Record the notice, then handle it (a failure leaves it pending for `drain`)."""
        self.enqueue(notice)
        return self.process(notice.incident_id)

    def enqueue(self, notice: IncidentNotice) -> None:
        """Record the notice for the next `drain` to handle (it is due at once)."""
        self.store.enqueue_ticket(notice.incident_id, notice.to_json(), self.clock())

    def drain(self, limit: int = 100) -> list[TicketOutcome]:
        """Handle every pending notice whose next attempt is due."""
        return [self.process(i) for i in self.store.due_jobs(self.clock(), limit)]

    async def submit_async(self, notice: IncidentNotice) -> TicketOutcome:
        return await asyncio.to_thread(self.submit, notice)

    def ticket_url(self, incident_id: str) -> str | None:
        row = self.store.ticket(incident_id)
        return self.tracker.url(row.ticket_key) if row else None

    def remediation_update(self, incident_id: str, marker: str, text: str, files: dict[str, bytes] | None = None,
                           resolve: bool = False) -> bool:
        """Tell the incident's ticket what its remediation loop did: a comment once per `marker`, `files`
        attached (names it carries already are skipped), and, once the node returned to service after
        validation, the ticket resolved. False when the incident has no ticket in this tracker."""
        with self._lock:
            row = self.store.ticket(incident_id)
            if row is None:
                return False
            key = row.ticket_key
            self.tracker.comment(key, redact(text), marker)
            if files:
                self.tracker.attach(key, files)
                self.store.add_attached(incident_id, list(files), self.clock())
            if resolve:
                self.tracker.resolve(key, self.policy.resolve_transition)
        log.info("ticket %s told of remediation: %s", key, text[:200], extra={"incident": incident_id, "ticket": key})
        return True

    # --- handling ----------------------------------------------------------------------------------
    def process(self, incident_id: str) -> TicketOutcome:
        with self._lock:
            outcome = replace(self._process(incident_id), sink=self.name)
        if self.metrics is not None:
            self.metrics.tickets.labels(self.tracker.name, outcome.status, outcome.action or "none").inc()
        return outcome

    def _process(self, incident_id: str) -> TicketOutcome:
        job = self.store.job(incident_id)
        if job is None:
            return TicketOutcome(incident_id, "done", "nothing queued")
        notice = IncidentNotice.model_validate(job.payload)
        ctx = {"incident": incident_id, "node": notice.dossier.node, "gpu_uuid": notice.dossier.gpu.uuid}
        attempt = 0
        while True:
            attempt += 1
            now = self.clock()
            try:
                decision, key = self._handle(notice, now)
            except PermanentError as exc:
                self.store.finish_job(incident_id, "failed", now, decision="failed", error=exc.message)
                log.error("ticket for %s refused for good: %s", incident_id, exc.message, extra=ctx)
                return TicketOutcome(incident_id, "failed", "permanent error", error=exc.message)
            except TemporaryError as exc:
                delay = max(self.retry.base_s * 2 ** (attempt - 1), exc.retry_after or 0.0)
                if attempt < self.retry.attempts and delay <= self.retry.max_wait_s and not exc.defer:
                    log.warning("ticket for %s: %s; retry %d/%d in %.1f s", incident_id, exc.message, attempt,
                                self.retry.attempts - 1, delay, extra=ctx)
                    self.sleep(delay)
                    continue
                failures = job.attempts + 1
                later = min(self.retry.queue_max_s, self.retry.queue_base_s * 2 ** (failures - 1))
                later = max(later, exc.retry_after or 0.0)
                at = now + timedelta(seconds=later)
                self.store.finish_job(incident_id, "pending", now, decision="pending", error=exc.message,
                                      next_attempt_at=at, failed_attempt=True)
                log.warning("ticket for %s delayed: %s; next attempt at %s", incident_id, exc.message,
                            at.isoformat(), extra=ctx)
                return TicketOutcome(incident_id, "pending", "transient error", error=exc.message)
            status: Literal["done", "pending"] = "pending" if decision.not_before is not None else "done"
            self.store.finish_job(incident_id, status, now, decision=f"{decision.action}: {decision.reason}",
                                  next_attempt_at=decision.not_before)
            log.info("ticket decision for %s: %s (%s)", incident_id, decision.action, decision.reason,
                     extra={**ctx, "ticket": key, "action": decision.action})
            return TicketOutcome(incident_id, status, decision.reason, decision.action, key)

    def _recover(self, s: TicketSubject, incident_id: str, now: datetime,
                 found: list[TicketInfo] | None) -> tuple[TicketRow | None, list[TicketInfo]]:
        """The map row for `incident_id`, or one rebuilt from a ticket labelled with it."""
        row = self.store.ticket(incident_id)
        if row is not None:
            return row, found or []
        if found is None:
            found = self.tracker.find_by_label(fingerprint_label(s.fingerprint))
        label = incident_label(incident_id)
        hit = next((t for t in found if label in t.labels), None)
        if hit is None:
            return None, found
        log.warning("ticket map had no row for %s: recovered %s by its labels", incident_id, hit.key,
                    extra={"incident": incident_id, "ticket": hit.key})
        count = s.count if incident_id == s.incident_id else 0
        row = self.store.put_ticket(incident_id=incident_id, fingerprint=s.fingerprint, key=hit.key,
                                    tracker=self.tracker.name, category=s.category, count=count, now=now,
                                    attached=sorted(hit.attachments), recovered=True)
        return row, found

    def _state(self, row: TicketRow | None) -> TicketState | None:
        if row is None:
            return None
        info = self.tracker.get(row.ticket_key)
        if info is None:
            log.warning("ticket %s of %s no longer exists in the tracker", row.ticket_key, row.incident_id)
            return None
        return self.store.state_of(row, info.resolved, info.attachments)

    def _handle(self, notice: IncidentNotice, now: datetime) -> tuple[TicketDecision, str | None]:
        s = notice.subject()
        found: list[TicketInfo] | None = None
        row: TicketRow | None = self.store.ticket(s.incident_id)
        if row is None and wants_ticket(s.category, self.policy)[0] and s.status != "resolved":
            row, found = self._recover(s, s.incident_id, now, None)
        state = self._state(row)
        previous: TicketState | None = None
        if state is None and s.previous_incident_id and wants_ticket(s.category, self.policy)[0]:
            prow, found = self._recover(s, s.previous_incident_id, now, found)
            previous = self._state(prow)
        if (state is not None and row is not None and row.recovered and s.previous_incident_id
                and self.policy.recurrence == "link"):
            # A ticket found by its labels may be one whose link to its predecessor was never made.
            prow, found = self._recover(s, s.previous_incident_id, now, found)
            if prow is not None and prow.ticket_key != row.ticket_key:
                self.tracker.link(row.ticket_key, prow.ticket_key, self.policy.link_type)
        d = decide_ticket(s, state, previous, now, self.policy)
        if d.action == "none":
            return d, d.key
        page = incident_page(self.incident_url_base, s.incident_id)
        files = dossier_files(notice, page)
        attach = {n: files[n] for n in d.attach if n in files}
        marker = comment_marker(s.incident_id, s.count, s.category)
        dossier = with_links(notice.dossier, page)
        key: str
        if d.action in ("create", "link"):
            assert d.fields is not None
            try:
                info = self.tracker.create(d.fields, redact(title(dossier)), TicketBody.of(dossier))
            except AmbiguousError as exc:
                # Jira may have created it; its search index (the only way to find it without the key)
                # lags behind, so the next look waits until the index has settled.
                raise AmbiguousError(f"{exc.message}; Jira may have created the ticket: looking for it in "
                                     f"{self.retry.index_settle_s:g} s", exc.status, self.retry.index_settle_s,
                                     defer=True) from None
            key = info.key
            if d.action == "link":
                assert d.key is not None
                self.tracker.link(key, d.key, self.policy.link_type)
            self.store.put_ticket(incident_id=s.incident_id, fingerprint=s.fingerprint, key=key,
                                  tracker=self.tracker.name, category=s.category, count=s.count, now=now)
        else:
            assert (d.key is not None and d.comment is not None) or d.action == "attach"
            key = d.key or ""
            if state is None:  # a recurrence told on its predecessor's ticket: label it for recovery
                self.tracker.add_labels(key, (incident_label(s.incident_id),))
            if d.action == "reopen":
                self.tracker.reopen(key, self.policy.reopen_transition)
            if d.comment is not None:
                text = d.comment + (f"\nIncident page: {page}" if page else "")
                self.tracker.comment(key, redact(text), marker)
            if d.action != "attach":
                self.store.put_ticket(incident_id=s.incident_id, fingerprint=s.fingerprint, key=key,
                                      tracker=self.tracker.name, category=s.category, count=s.count, now=now,
                                      commented=True)
        if attach:
            done = self.tracker.attach(key, attach)
            self.store.add_attached(s.incident_id, list(attach), now)
            if done:
                log.info("attached %s to %s", ", ".join(done), key, extra={"incident": s.incident_id, "ticket": key})
        return d, key
