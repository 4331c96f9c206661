"""Sinks of the incident pipeline: every configured destination is told about incidents (Jira
tickets, Slack messages, a destination registered beside them), or, with none of a kind configured,
the same content goes to files in a local outbox.

The generic code decides and keeps each sink's delivery state; each destination renders the
neutral content its own way and delivers it:

- `model.IncidentNotice`: what the sinks take from the stream (a dossier and routing facts).
- `tickets.TicketSink`: one tracker's ticket decisions (`models.ticket_policy`), its queue and its
  incident→ticket map in SQL, handing a `ports.TicketTracker` the dossier as a document
  (`ports.TicketBody`).
- `notifications.ChatNotifier`: one chat destination's Alertmanager semantics (`models.notify`),
  its alerts, notification log and failures in SQL, handing a `ports.ChatTransport` a group's
  message or a thread reply (`content`, `models.chat_message`); silences are shared.
- `fanout.TicketSinks`, `fanout.ChatSinks`: every sink of a kind, handed each notice.
- The destinations, one folder each, with its params class, its sink class and its
  `ports.Destination`: `jira/` (wiki markup or ADF), `slack/` (Block Kit), `outbox/` (files, the
  fallback); registered in `registry`, the one place that imports them.
- `settings.SinkSettings` and `build.build_sinks`: one settings object, one composition function.
- `sink_store.SinkStore`: the SQL state, each sink's rows under its name.

The client libraries (jira, slack-sdk, SQLAlchemy) are synchronous; the async entry points run
them in threads.
"""
