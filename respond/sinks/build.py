"""Composition of the sinks from `SinkSettings`: a ticket sink per configured tracker, a chat
notifier per configured chat destination (`registry.open_sinks`: Jira, Slack, a destination
registered there, or the outbox when none of a kind is) and a page sink per configured paging
destination (Alertmanager, ...), all over one SQL store, each with its own rows in it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from history.engine import make_engine
from models.notify import GroupPolicy
from respond.sinks.fanout import ChatSinks, PageSinks, TicketSinks
from respond.sinks.notifications import ChatNotifier
from respond.sinks.pages import PageSink
from respond.sinks.registry import open_sinks
from respond.sinks.settings import SinkSettings
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import RetryPolicy, TicketSink
from service.metrics import ResponderMetrics

log = logging.getLogger(__name__)


@dataclass
class Sinks:
    store: SinkStore
    tickets: TicketSinks
    chat: ChatSinks
    pages: PageSinks = field(default_factory=lambda: PageSinks([]))
    ticket_drain_interval_s: float = 10.0  # how often the responder drains the ticket queues
    chat_flush_interval_s: float = 5.0  # how often the responder decides again for waiting chat groups
    owner_keys: tuple[str, ...] = ()  # pod labels or annotations naming the owning team (cluster evidence)
    page_drain_interval_s: float = 5.0  # how often the responder decides again for due pages (retries, resends)

    def use_metrics(self, metrics: ResponderMetrics) -> None:
        self.tickets.use_metrics(metrics)
        self.chat.use_metrics(metrics)
        self.pages.use_metrics(metrics)

    def adopt(self) -> None:
        """Give the rows written before sinks had names (migration 0008) to the first sink of their
        kind: until then each kind had that one sink. Call it once the database is migrated."""
        for kind, first in (("tickets", self.tickets.sinks[0].name), ("chat", self.chat.sinks[0].name)):
            adopted = self.store.adopt(kind, first)
            if adopted:
                log.warning("%d %s rows written before sinks had names now belong to sink %s", adopted, kind, first)


def build_sinks(settings: SinkSettings, database_url: str) -> Sinks:
    """The sinks of these settings, over the store in `database_url` (the ticket maps, queues,
    notification logs and silences)."""
    store = SinkStore(make_engine(database_url))
    trackers = open_sinks("tickets", settings)
    transports = open_sinks("chat", settings)
    pagers = open_sinks("pages", settings)
    log.info("sinks: tickets via %s, chat via %s, pages via %s", ", ".join(n for n, _ in trackers),
             ", ".join(n for n, _ in transports), ", ".join(n for n, _ in pagers) or "none")
    retry = RetryPolicy(attempts=settings.ticket_attempts, base_s=settings.ticket_retry_base_s,
                        max_wait_s=settings.ticket_retry_max_wait_s, queue_base_s=settings.ticket_queue_base_s,
                        queue_max_s=settings.ticket_queue_max_s, index_settle_s=settings.ticket_index_settle_s)
    tickets = TicketSinks([TicketSink(tracker, store, settings.ticket_policy, retry, name=name,
                                      incident_url_base=settings.incident_url_base) for name, tracker in trackers])
    policy = GroupPolicy(group_by=settings.group_by, group_wait=timedelta(seconds=settings.group_wait_s),
                         group_interval=timedelta(seconds=settings.group_interval_s),
                         repeat_interval=timedelta(seconds=settings.repeat_interval_s))
    chat = ChatSinks([ChatNotifier(transport, store, settings.routing, policy, name=name,
                                   channel_interval_s=settings.slack_channel_interval_s,
                                   retry_base_s=settings.chat_retry_base_s, retry_max_s=settings.chat_retry_max_s,
                                   ticket_url=tickets.ticket_url, retention_s=settings.chat_retention_s,
                                   incident_url_base=settings.incident_url_base) for name, transport in transports])
    pages = PageSinks([PageSink(pager, store, name=name, retry_base_s=settings.page_retry_base_s,
                                retry_max_s=settings.page_retry_max_s, ticket_url=tickets.ticket_url,
                                incident_url_base=settings.incident_url_base) for name, pager in pagers])
    return Sinks(store, tickets, chat, pages, settings.ticket_drain_interval_s, settings.chat_flush_interval_s,
                 settings.owner_keys, settings.page_drain_interval_s)
