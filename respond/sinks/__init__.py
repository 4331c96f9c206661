"""Sinks of the incident pipeline: Jira tickets and Slack notifications, or, with neither
configured, the same content as files in a local outbox.

- `model.IncidentNotice`: what the sinks take from the stream (a dossier and routing facts).
- `tickets.TicketSink`: ticket decisions (`models.ticket_policy`), the incident→ticket map and the
  pending queue in SQL, acting through a `ports.TicketTracker` (`jira.JiraTracker` or
  `outbox.OutboxTracker`).
- `notifications.ChatNotifier`: Alertmanager semantics (`models.notify`), silences and the
  notification log in SQL, sending through a `ports.ChatTransport`
  (`slack.SlackWebTransport`, `slack.SlackWebhookTransport` or
  `outbox.OutboxChat`).
- `ports.Destination`: one params class and one sink class filling a port; the shipped ones in
  `jira/`, `slack/` and `outbox/`, all registered in `registry`, which `build.build_sinks` reads.
- `settings.SinkSettings` and `build.build_sinks`: one settings object, one composition function.

The client libraries (jira, slack-sdk, SQLAlchemy) are synchronous; the async entry points run
them in threads.
"""
