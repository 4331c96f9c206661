"""The page sink: one paging destination (a `ports.Pager`: Alertmanager, PagerDuty, CloudEvents, the
outbox) told about every incident on its own, by the one decision `models.paging.decide_pages`.

Each incident is a row of the sink's own in the `pages` table (`SinkStore.for_sink`): its latest
snapshot, the remediation transitions handed to it (`tell`), and what the destination was told
(`PageLog`), written only after it accepted each event. A notice is recorded first (`enqueue`),
then decided and delivered (`deliver`); `drain` (run in a loop by `run`) decides again for every
row that is due: a retry, or a firing incident's resend (`PagePolicy.resend`, Alertmanager's).

Delivery is at-least-once and safe to repeat: an event carries a stable id (`models.paging.event_id`)
and the alert's key (`models.paging.alert_key`), by which the destination deduplicates. A
transient failure is retried with exponential backoff (`retry_base_s` doubling up to `retry_max_s`,
never sooner than the destination's Retry-After); an event the destination refuses for good
(`PermanentError`) makes the row `dead` with the error (the sink's dead letters, listed by
`SinkStore.pages("dead")`) until the incident's next snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from history.sink_tables import PageRow
from models.chat_message import message_content
from models.dossier import Dossier, gpu_label, severity_of
from models.paging import (
    PageFacts,
    PageItem,
    PageKind,
    PageLog,
    PageStatus,
    Step,
    alert_key,
    decide_pages,
    event_id,
    facts_of,
)
from respond.errors import ActionError, PermanentError
from respond.sinks.content import incident_page
from respond.sinks.model import IncidentNotice
from respond.sinks.ports import PageEvent, Pager
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import utcnow
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)
ALERTNAME = "XidpipeIncident"


@dataclass(frozen=True, slots=True)
class PageOutcome:
    incident_id: str
    action: str  # sent, none, failed, dead
    reason: str
    events: tuple[str, ...] = ()  # the kinds of the events the destination accepted
    error: str | None = None
    sink: str = ""


def page_labels(notice: IncidentNotice, generation: int = 1) -> dict[str, str]:
    """The alert's labels: what identifies and routes it (alertname, cluster, node, gpu, family, severity,
    team, namespace, component, and `incident`: the alert's key, so a reopen is a new alert), the empty
    ones left out."""
    d = notice.dossier
    gpu = d.gpu.uuid or (str(d.gpu.index) if d.gpu.index is not None else None) or d.gpu.pci or ""
    labels = {"alertname": ALERTNAME, "cluster": d.cluster or "", "node": d.node, "gpu": gpu, "family": d.family,
              "severity": severity_of(d).value, "team": d.attribution.owner or "",
              "namespace": d.attribution.namespace or "", "component": d.component,
              "incident": alert_key(d.incident_id, generation)}
    return {k: v for k, v in labels.items() if v}


def summary_rows(d: Dossier) -> tuple[tuple[str, str], ...]:
    """The dossier's summary, row by row (plain, redacted): the incident, its classification and the
    facts a message shows (where, workload, codes, seen, the decision as the account words it)."""
    content = message_content(d)
    head = [("Incident", f"{d.incident_id} ({d.status})"), ("Fault family", d.family),
            ("Classification", f"{content.category}: {content.reason}")]
    gpu = gpu_label(d)
    if gpu:
        head.append(("GPU", gpu))
    return (*head, *content.fields)


def _step_json(step: Step) -> dict[str, str]:
    return {"key": step.key, "at": step.at.isoformat(), "text": step.text, "action": step.action,
            "outcome": step.outcome}


def _step_of(data: dict[str, str]) -> Step:
    return Step(data["key"], "remediation", datetime.fromisoformat(data["at"]), data["text"],
                data.get("action", ""), data.get("outcome", ""))


def _log_of(row: PageRow) -> PageLog | None:
    if row.told_status is None or row.sent_at is None:
        return None
    status: PageStatus = "resolved" if row.told_status == "resolved" else "firing"
    return PageLog(status, row.told_revision, frozenset(row.told_steps), row.sent_at, max(row.generation, 1))


class PageSink:
    """One paging destination: its pager, and its own rows in `store` (those of the sink `name`)."""

    def __init__(self, pager: Pager, store: SinkStore, *, name: str | None = None, retry_base_s: float = 30.0,
                 retry_max_s: float = 900.0, ticket_url: Callable[[str], str | None] = lambda _: None,
                 incident_url_base: str | None = None, clock: Callable[[], datetime] = utcnow,
                 metrics: ResponderMetrics | None = None) -> None:
        self.pager = pager
        self.name = name or pager.name
        self.store = store.for_sink(self.name)
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.ticket_url = ticket_url
        self.incident_url_base = incident_url_base
        self.clock = clock
        self.metrics = metrics
        self._lock = threading.Lock()

    # --- entry points ------------------------------------------------------------------------------
    def enqueue(self, notice: IncidentNotice) -> None:
        self.store.upsert_page(notice.incident_id, notice.to_json(), self.clock())

    def submit(self, notice: IncidentNotice) -> PageOutcome:
        self.enqueue(notice)
        return self.deliver(notice.incident_id)

    async def submit_async(self, notice: IncidentNotice) -> PageOutcome:
        return await asyncio.to_thread(self.submit, notice)

    def tell(self, incident_id: str, key: str, text: str) -> bool:
        """A remediation transition to tell, once per `key`; False when the sink never had the incident."""
        step = Step(key, "remediation", self.clock(), text)
        if not self.store.add_page_step(incident_id, _step_json(step), self.clock()):
            return False
        self.deliver(incident_id)
        return True

    def drain(self, limit: int = 100) -> list[PageOutcome]:
        """Decide again for every due row: retries and resends."""
        return [self.deliver(i) for i in self.store.due_pages(self.clock(), limit)]

    async def run(self, stop: asyncio.Event, interval_s: float = 5.0) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.drain)
            except Exception:
                log.exception("page drain of %s failed; retrying in %.0f s", self.name, interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    # --- one incident ------------------------------------------------------------------------------
    def deliver(self, incident_id: str) -> PageOutcome:
        with self._lock:
            outcome = self._deliver(incident_id)
        if self.metrics is not None and outcome.action != "none":
            self.metrics.pages.labels(self.name, outcome.action).inc()
        return outcome

    def _deliver(self, incident_id: str) -> PageOutcome:
        now = self.clock()
        row = self.store.page(incident_id)
        if row is None:
            return PageOutcome(incident_id, "none", "the sink never had the incident", sink=self.name)
        if row.state == "dead":
            return PageOutcome(incident_id, "dead", f"refused for good: {row.last_error}", error=row.last_error,
                               sink=self.name)
        notice = IncidentNotice.model_validate(row.payload)
        facts = facts_of(notice.dossier)
        told = _log_of(row)
        extra = tuple(_step_of(x) for x in row.extra_steps)
        decision = decide_pages(facts, told, now, self.pager.policy, extra)
        ctx = {"incident": incident_id, "node": notice.dossier.node, "sink": self.name}
        labels = page_labels(notice, decision.generation)
        held = {str(k): str(v) for k, v in row.told_labels.items()}
        sent: list[str] = []
        for item in decision.items:
            event = self._event(notice, facts, item, decision.generation, labels, held, now)
            try:
                self.pager.send(event)
            except ActionError as exc:
                return self._failed(row, exc, sent, decision.reason, now, ctx)
            steps = [item.key] if item.step is not None else []
            self.store.page_told(incident_id, status=event.status, revision=facts.revision, steps=steps,
                                 labels=labels, generation=decision.generation, sent_at=now)
            held = labels
            sent.append(str(item.kind))
        state, at = ("idle", decision.resend_at) if decision.resend_at is not None else ("done", now)
        self.store.page_settled(incident_id, state, at, decision.reason, now)
        if sent:
            log.info("paged %s via %s: %s (%s)", incident_id, self.name, ", ".join(sent), decision.reason, extra=ctx)
        return PageOutcome(incident_id, "sent" if sent else "none", decision.reason, tuple(sent), sink=self.name)

    def _event(self, notice: IncidentNotice, facts: PageFacts, item: PageItem, generation: int,
               labels: dict[str, str], held: dict[str, str], now: datetime) -> PageEvent:
        d = notice.dossier
        status: PageStatus = "resolved" if item.kind == PageKind.RESOLVED else facts.status
        if item.kind in (PageKind.OPENED, PageKind.CHANGED, PageKind.REFRESH):
            status = "firing"
        content = message_content(d, self.ticket_url(d.incident_id), incident_page(self.incident_url_base,
                                                                                  d.incident_id))
        return PageEvent(id=event_id(d.incident_id, item.kind, item.key), kind=item.kind, incident_id=d.incident_id,
                         alert_key=alert_key(d.incident_id, generation), status=status, severity=facts.severity,
                         started_at=d.first_seen, at=now, labels=labels, content=content, summary=summary_rows(d),
                         step=item.step, told_labels=held if held and held != labels else None)

    def _failed(self, row: PageRow, exc: ActionError, sent: list[str], reason: str, now: datetime,
                ctx: dict[str, str]) -> PageOutcome:
        permanent = isinstance(exc, PermanentError)
        failed_before = 0 if sent else row.attempts  # an accepted event of this pass ended the earlier failures
        delay = min(self.retry_max_s, self.retry_base_s * 2 ** failed_before)
        delay = max(delay, exc.retry_after or 0.0)
        at = now + timedelta(seconds=delay)
        self.store.page_failed(row.incident_id, exc.message, at, permanent, now)
        what = "refused for good: dead letter" if permanent else f"retried at {at.isoformat()}"
        log.warning("page of %s via %s failed (%s): %s", row.incident_id, self.name, what, exc.message, extra=ctx)
        return PageOutcome(row.incident_id, "dead" if permanent else "failed", reason, tuple(sent), exc.message,
                           self.name)
