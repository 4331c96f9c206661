"""Composition of the sinks from `SinkSettings`: Jira or the outbox, Slack (bot or webhooks) or the
outbox, over one SQL store."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from models.notify import GroupPolicy
from respond.sinks.jira_tracker import JiraTracker
from respond.sinks.notifications import ChatNotifier
from respond.sinks.outbox import OutboxChat, OutboxTracker
from respond.sinks.ports import ChatTransport, TicketTracker
from respond.sinks.settings import SinkSettings
from respond.sinks.sink_store import SinkStore, make_engine
from respond.sinks.slack_notifier import SlackWebhookTransport, SlackWebTransport
from respond.sinks.tickets import RetryPolicy, TicketSink

log = logging.getLogger(__name__)


@dataclass
class Sinks:
    store: SinkStore
    tickets: TicketSink
    chat: ChatNotifier


def build_sinks(settings: SinkSettings, store: SinkStore | None = None) -> Sinks:
    store = store or SinkStore(make_engine(settings.database_url))
    tracker: TicketTracker
    if settings.jira_url and settings.jira_user and settings.jira_api_token:
        tracker = JiraTracker(settings.jira_url, settings.jira_user, settings.jira_api_token,
                              timeout_s=settings.jira_timeout_s)
    else:
        tracker = OutboxTracker(settings.outbox_dir)
    transport: ChatTransport
    if settings.slack_bot_token:
        transport = SlackWebTransport(settings.slack_bot_token, base_url=settings.slack_base_url,
                                      timeout_s=settings.slack_timeout_s,
                                      rate_limit_retries=settings.slack_rate_limit_retries,
                                      server_error_retries=settings.slack_server_error_retries)
    elif settings.slack_webhooks:
        transport = SlackWebhookTransport(settings.slack_webhooks, timeout_s=settings.slack_timeout_s,
                                          rate_limit_retries=settings.slack_rate_limit_retries,
                                          server_error_retries=settings.slack_server_error_retries)
    else:
        transport = OutboxChat(settings.outbox_dir)
    log.info("sinks: tickets via %s, chat via %s", tracker.name, transport.name)
    tickets = TicketSink(tracker, store, settings.ticket_policy, RetryPolicy(
        attempts=settings.ticket_attempts, base_s=settings.ticket_retry_base_s,
        max_wait_s=settings.ticket_retry_max_wait_s, queue_base_s=settings.ticket_queue_base_s,
        queue_max_s=settings.ticket_queue_max_s, index_settle_s=settings.ticket_index_settle_s))
    policy = GroupPolicy(group_by=settings.group_by, group_wait=timedelta(seconds=settings.group_wait_s),
                         group_interval=timedelta(seconds=settings.group_interval_s),
                         repeat_interval=timedelta(seconds=settings.repeat_interval_s))
    chat = ChatNotifier(transport, store, settings.routing, policy,
                        channel_interval_s=settings.slack_channel_interval_s, retry_base_s=settings.chat_retry_base_s,
                        retry_max_s=settings.chat_retry_max_s, ticket_url=tickets.ticket_url,
                        retention_s=settings.chat_retention_s)
    return Sinks(store, tickets, chat)
