"""The chat notifier: Alertmanager's chain (silence → wait → dedup → send → record) over a
`ChatTransport`. One per configured chat destination (`fanout.ChatSinks`), each with its own alerts,
notification log and failures, under its name; the transport renders what it is handed (a
group's message or a thread reply, `content`) in its own format.

Each incident is an alert; alerts are grouped by `GroupPolicy.group_by` within their channel
(`models.chat_message.route`). `models.notify.decide` says whether a group is sent now, updated,
held back (group_wait, group_interval) or suppressed (silenced, already notified, repeat interval
not over). The first message of a group is its thread root; later changes edit the root
(`chat.update`) and add a reply in its thread, instead of new top-level messages. Transports
without threads (incoming webhooks) post a new message per change.

The notification log (channel, root ts, content hash, time) is written only after the send
succeeded; a failed send is recorded in `chat_failures` with the next attempt time, and `flush()`
(run in a loop by `run()`) tries again: nothing is lost. A timeout leaves it unknown whether the
destination posted the message, so before posting again it is asked for the message's key
(`ChatTransport.find`).
After a group's message went out, each workload its incidents' faults hit is told once in its own
team's channel (`models.affected_notice`: "your job was killed by a hardware fault ... requeue it"),
under a key per incident and workload in the notification log, so a redelivered incident tells
nobody twice; a failed post is retried by a later flush, as a group's is.
Sends to one channel are paced (`channel_interval_s`, Slack allows about one message per second
per channel). Groups whose alerts are all resolved, and told so, are forgotten after `retention_s`
(their log entry stays: a later alert in the same group continues the same thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from models.affected_notice import AffectedNotice, affected_notices
from models.chat_message import ChatMessage, Routing, route
from models.notify import Alert, GroupPolicy, SentRecord, content_hash, decide, group_key
from respond.errors import ActionError, AmbiguousError, PermanentError
from respond.sinks.content import group_message, group_reply, incident_page
from respond.sinks.model import IncidentNotice
from respond.sinks.ports import ChatTransport, Posted
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import utcnow
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatOutcome:
    group_key: str
    action: str  # send, update, wait, suppress, failed
    reason: str
    channel: str | None = None
    ts: str | None = None
    error: str | None = None
    sink: str = ""  # the chat sink that decided it


def _slug(group: str) -> str:
    return hashlib.sha256(group.encode()).hexdigest()[:12]


def _affected_digest(payload: dict[str, Any]) -> str:
    """What an incident's affected notices depend on, in a notice's JSON: its class, workloads and namespaces."""
    d = payload.get("dossier") or {}
    facts = [d.get("category"), d.get("component"), d.get("affected"), d.get("attribution"),
             payload.get("namespace_meta"), payload.get("namespaces")]
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class ChatNotifier:
    """One chat destination: its transport, and its own alerts, notification log and failures in
    `store` (the rows of the sink `name`, by default the transport's name)."""

    def __init__(self, transport: ChatTransport, store: SinkStore, routing: Routing | None = None,
                 policy: GroupPolicy | None = None, *, channel_interval_s: float = 1.0, retry_base_s: float = 30.0,
                 retry_max_s: float = 900.0, ticket_url: Callable[[str], str | None] = lambda _: None,
                 clock: Callable[[], datetime] = utcnow, sleep: Callable[[float], None] = time.sleep,
                 retention_s: float = 86400.0, incident_url_base: str | None = None,
                 metrics: ResponderMetrics | None = None, name: str | None = None) -> None:
        self.incident_url_base = incident_url_base
        self.metrics = metrics
        self.transport = transport
        self.name = name or transport.name
        self.store = store.for_sink(self.name)
        self.routing = routing or Routing()
        self.policy = policy or GroupPolicy()
        self.channel_interval_s = channel_interval_s
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.ticket_url = ticket_url
        self.clock = clock
        self.sleep = sleep
        self.retention = timedelta(seconds=retention_s)
        self._last_send: dict[str, float] = {}
        self._affected_done: dict[str, str] = {}  # incident → digest of what its affected notices were decided from
        self._lock = threading.Lock()

    # --- entry points ------------------------------------------------------------------------------
    def submit(self, notice: IncidentNotice) -> ChatOutcome:
        return self.flush_group(self.enqueue(notice))

    def enqueue(self, notice: IncidentNotice) -> str:
        """Record the notice as an alert of its group, for the next flush to send; returns the group key."""
        d = notice.dossier
        channel, why = route(d.category, d.attribution.namespace, notice.namespace_meta, self.routing)
        labels = notice.alert_labels()
        gk = f"{channel}:{group_key(labels, self.policy.group_by)}"
        log.debug("incident %s routed to %s: %s", notice.incident_id, channel, why,
                  extra={"incident": notice.incident_id, "node": d.node, "channel": channel})
        self.store.upsert_alert(fingerprint=notice.incident_id, group_key=gk, channel=channel,
                                incident_id=notice.incident_id, labels=labels, status=notice.alert_status,
                                starts_at=d.first_seen, payload=notice.to_json(), now=self.clock())
        return gk

    def flush(self) -> list[ChatOutcome]:
        """Decide again for every group: group_wait and group_interval ends, retries, repeats."""
        outcomes = [self.flush_group(gk) for gk in self.store.group_keys()]
        self.store.prune_alerts(self.clock() - self.retention)
        return outcomes

    async def submit_async(self, notice: IncidentNotice) -> ChatOutcome:
        return await asyncio.to_thread(self.submit, notice)

    async def run(self, stop: asyncio.Event, interval_s: float = 5.0) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.flush)
            except Exception:
                log.exception("notification flush failed; retrying in %.0f s", interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    def tell(self, incident_id: str, key: str, text: str) -> bool:
        """One message about an incident outside the grouping cycle (a remediation loop's transition), once
        per `key`: a reply in its group's thread (a message of its own where the transport has no threads
        or the group none yet). False when this sink never had the incident (no group to tell)."""
        with self._lock:
            alert = self.store.alert(incident_id)
            if alert is None:
                return False
            gk = alert.group_key
            log_key = f"{_slug(gk)}#{key}"[:512]
            if self.store.sent(log_key) is not None:
                return True
            entry = self.store.sent(gk)
            notices = [IncidentNotice.model_validate(r.payload) for r in self.store.alerts(gk)
                       if r.incident_id == incident_id]
            reply = group_reply(text, group_message(notices, self.ticket_url, self.incident_url_base, gk))
            thread = entry.thread_ts if entry is not None and self.transport.threads else None
            channel = entry.channel if entry is not None else alert.channel
            posted = self._post(channel, reply, f"xidpipe-{_slug(log_key)}", thread, False, channel)
            self.store.log_sent(group_key=log_key, channel=posted.channel, thread_ts=thread, last_ts=posted.ts,
                                content_hash=_slug(text), sent_at=self.clock(), transport=self.transport.name)
        log.info("told %s in %s: %s", incident_id, posted.channel, text[:200], extra={"incident": incident_id})
        return True

    # --- one group ---------------------------------------------------------------------------------
    def flush_group(self, gk: str) -> ChatOutcome:
        with self._lock:
            outcome = replace(self._flush_group(gk), sink=self.name)
            told = self._tell_affected(gk)
        if self.metrics is not None:
            for o in (outcome, *told):
                if o.action not in ("wait", "suppress"):  # decided again every flush
                    self.metrics.chat.labels(self.transport.name, o.action).inc()
        return outcome

    # --- the workloads a group's incidents hit -----------------------------------------------------
    def _tell_affected(self, gk: str) -> list[ChatOutcome]:
        """Each workload the group's incidents hit, told once in its team's channel, once the group's own
        message went out, unless a silence matches the incident. An incident whose workloads and namespaces
        were all told as they stand now is
        passed over without reading its dossier (its digest, kept in memory: after a restart each incident
        is read once more, and the notification log says which workloads were told)."""
        if self.store.sent(gk) is None:
            return []
        out: list[ChatOutcome] = []
        now = self.clock()
        silences = self.store.silences(now)
        for row in self.store.alerts(gk):
            digest = _affected_digest(row.payload)
            if self._affected_done.get(row.incident_id) == digest:
                continue
            if any(s.silences(row.labels, now) for s in silences):
                continue  # a silenced incident tells nobody; its teams are told if it stands when the silence ends
            notice = IncidentNotice.model_validate(row.payload)
            page = incident_page(self.incident_url_base, notice.incident_id)
            told = [a for a in affected_notices(notice.dossier, notice.namespace_metas(), self.routing, page)
                    if a.told]
            outcomes = [o for a in told if (o := self._tell_one(notice.incident_id, a)) is not None]
            out += outcomes
            if all(o.action == "affected" for o in outcomes):
                self._affected_done[row.incident_id] = digest
        return out

    def _tell_one(self, incident_id: str, a: AffectedNotice) -> ChatOutcome | None:
        """Post one affected workload's notice unless it was posted (None then); a failure is recorded
        with its next attempt."""
        assert a.channel is not None and a.message is not None
        log_key = f"{_slug(incident_id)}#{a.key}"[:512]
        now = self.clock()
        if self.store.sent(log_key) is not None:
            return None
        failure = self.store.failure(log_key)
        if failure is not None and now < failure.next_attempt_at:
            return ChatOutcome(log_key, "wait", f"retrying after {failure.next_attempt_at.isoformat()}", a.channel)
        ctx = {"incident": incident_id, "channel": a.channel, "workload": a.workload}
        try:
            posted = self._post(a.channel, a.message, f"xidpipe-{_slug(log_key)}", None, failure is not None,
                                a.channel)
        except ActionError as exc:
            attempts = (failure.attempts if failure else 0) + 1
            permanent = isinstance(exc, PermanentError)
            delay = self.retry_max_s if permanent else max(
                min(self.retry_max_s, self.retry_base_s * 2 ** (attempts - 1)), exc.retry_after or 0.0)
            self.store.record_failure(log_key, a.channel, exc.message, now + timedelta(seconds=delay), now, permanent)
            log.warning("telling %s in %s failed: %s", a.workload, a.channel, exc.message, extra=ctx)
            return ChatOutcome(log_key, "failed", a.reason, a.channel, error=exc.message)
        self.store.log_sent(group_key=log_key, channel=posted.channel, thread_ts=None, last_ts=posted.ts,
                            content_hash=_slug(a.message.text), sent_at=now, transport=self.transport.name)
        log.info("told %s in %s that %s hit it: %s", a.workload, posted.channel, incident_id, a.reason, extra=ctx)
        return ChatOutcome(log_key, "affected", a.reason, posted.channel, posted.ts)

    def _flush_group(self, gk: str) -> ChatOutcome:
        now = self.clock()
        rows = self.store.alerts(gk)
        if not rows:
            return ChatOutcome(gk, "suppress", "no alerts in the group")
        channel = rows[-1].channel
        failure = self.store.failure(gk)
        if failure is not None and now < failure.next_attempt_at:
            return ChatOutcome(gk, "wait", f"retrying after {failure.next_attempt_at.isoformat()}: "
                                           f"{failure.last_error}", channel)
        entry = self.store.sent(gk)
        sent = SentRecord(gk, entry.sent_at, entry.content_hash, entry.thread_ts) if entry else None
        alerts = [Alert(r.fingerprint, r.labels, "resolved" if r.status == "resolved" else "firing", r.starts_at)
                  for r in rows]
        decision = decide(alerts, now, self.policy, sent, self.store.silences(now))
        ctx = {"group": gk, "channel": channel, "action": decision.action}
        if decision.action in ("wait", "suppress"):
            log.info("notification %s for %s: %s", decision.action, gk, decision.reason, extra=ctx)
            return ChatOutcome(gk, decision.action, decision.reason, channel)
        chosen = {a.fingerprint for a in decision.alerts}
        notices = [IncidentNotice.model_validate(r.payload) for r in rows if r.fingerprint in chosen]
        digest = content_hash(decision.alerts)
        key = f"xidpipe-{_slug(gk)}-{digest}"
        retrying = failure is not None
        message = group_message(notices, self.ticket_url, self.incident_url_base, gk)
        try:
            if entry is None or entry.thread_ts is None or not self.transport.threads:
                posted = self._post(channel if entry is None else entry.channel, message, key, None, retrying,
                                    channel)
                root = posted.ts if entry is None else entry.thread_ts
            else:
                self._pace(channel)
                try:
                    self.transport.update(entry.channel, entry.thread_ts, message, key)
                except PermanentError as exc:
                    if exc.status != 404 and "message_not_found" not in exc.message:
                        raise
                    # Someone deleted the thread's root: the group starts a new thread.
                    log.warning("root message of %s is gone (%s): starting a new thread", gk, exc.message, extra=ctx)
                    posted = self._post(entry.channel, message, f"{key}-new", None, retrying, channel)
                    root = posted.ts
                else:
                    reply = group_reply(decision.reason, message)
                    posted = self._post(entry.channel, reply, f"{key}-reply", entry.thread_ts, retrying, channel)
                    root = entry.thread_ts
        except ActionError as exc:
            permanent = isinstance(exc, PermanentError)
            attempts = (failure.attempts if failure else 0) + 1
            delay = min(self.retry_max_s, self.retry_base_s * 2 ** (attempts - 1))
            delay = self.retry_max_s if permanent else max(delay, exc.retry_after or 0.0)
            at = now + timedelta(seconds=delay)
            self.store.record_failure(gk, channel, exc.message, at, now, permanent)
            log.warning("notification for %s failed (%s): %s; next attempt at %s", gk,
                        "permanent" if permanent else "transient", exc.message, at.isoformat(), extra=ctx)
            return ChatOutcome(gk, "failed", decision.reason, channel, error=exc.message)
        self.store.log_sent(group_key=gk, channel=posted.channel, thread_ts=root, last_ts=posted.ts,
                            content_hash=digest, sent_at=now, transport=self.transport.name)
        log.info("notification %s for %s in %s: %s", decision.action, gk, posted.channel, decision.reason, extra=ctx)
        return ChatOutcome(gk, decision.action, decision.reason, posted.channel, posted.ts)

    def _post(self, channel: str, message: ChatMessage, key: str, thread_ts: str | None, check_first: bool,
              pace_key: str) -> Posted:
        if check_first:
            found = self.transport.find(channel, key, thread_ts)
            if found is not None:
                log.info("message %s was posted before the last failure: not posting it again", key)
                return found
        self._pace(pace_key)
        try:
            return self.transport.post(channel, message, key, thread_ts)
        except AmbiguousError:
            found = self.transport.find(channel, key, thread_ts)
            if found is not None:
                return found
            raise

    def _pace(self, channel: str) -> None:
        """At most one message per `channel_interval_s` per channel."""
        last = self._last_send.get(channel)
        if last is not None:
            wait = last + self.channel_interval_s - time.monotonic()
            if wait > 0:
                self.sleep(wait)
        self._last_send[channel] = time.monotonic()
