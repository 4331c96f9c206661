"""Composition of the sinks from `SinkSettings`: the ticket sink and the chat notifier over one SQL
store, each acting through the first configured destination of its port (`registry`): Jira or the
outbox, Slack (bot or webhooks) or the outbox, or a destination registered there."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from history.engine import make_engine
from models.notify import GroupPolicy
from respond.sinks.notifications import ChatNotifier
from respond.sinks.registry import open_port
from respond.sinks.settings import SinkSettings
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import RetryPolicy, TicketSink

log = logging.getLogger(__name__)


@dataclass
class Sinks:
    store: SinkStore
    tickets: TicketSink
    chat: ChatNotifier
    ticket_drain_interval_s: float = 10.0  # how often the responder drains the ticket queue
    chat_flush_interval_s: float = 5.0  # how often the responder decides again for waiting chat groups
    owner_keys: tuple[str, ...] = ()  # pod labels or annotations naming the owning team (cluster evidence)


def build_sinks(settings: SinkSettings, database_url: str) -> Sinks:
    """The sinks of these settings, over the store in `database_url` (the ticket map, notification log
    and silences)."""
    store = SinkStore(make_engine(database_url))
    tracker = open_port("tickets", settings)
    transport = open_port("chat", settings)
    log.info("sinks: tickets via %s, chat via %s", tracker.name, transport.name)
    tickets = TicketSink(tracker, store, settings.ticket_policy, RetryPolicy(
        attempts=settings.ticket_attempts, base_s=settings.ticket_retry_base_s,
        max_wait_s=settings.ticket_retry_max_wait_s, queue_base_s=settings.ticket_queue_base_s,
        queue_max_s=settings.ticket_queue_max_s, index_settle_s=settings.ticket_index_settle_s),
        incident_url_base=settings.incident_url_base)
    policy = GroupPolicy(group_by=settings.group_by, group_wait=timedelta(seconds=settings.group_wait_s),
                         group_interval=timedelta(seconds=settings.group_interval_s),
                         repeat_interval=timedelta(seconds=settings.repeat_interval_s))
    chat = ChatNotifier(transport, store, settings.routing, policy,
                        channel_interval_s=settings.slack_channel_interval_s, retry_base_s=settings.chat_retry_base_s,
                        retry_max_s=settings.chat_retry_max_s, ticket_url=tickets.ticket_url,
                        retention_s=settings.chat_retention_s, incident_url_base=settings.incident_url_base)
    return Sinks(store, tickets, chat, settings.ticket_drain_interval_s, settings.chat_flush_interval_s,
                 settings.owner_keys)
