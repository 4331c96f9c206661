"""What the ticket and chat sinks would have done with a replay's incidents, decided, never sent.

For every incident the stream asked a ticket for, the ticket sink's decision (`models.ticket_policy.
decide_ticket`, with the tickets this replay opened as the ticket map), made in event time: when the
incident opened, in the order the incidents opened, as the sink decides when the request arrives
(an incident resolved later in the recording was open then); for every incident it asked a
notification for, the chat routing (`models.chat_message.route`) and the Alertmanager group the
message would join (`models.notify.group_key`). Dossiers are built as the responder builds them
(`respond.dossier_builder.build_dossier`), so the ticket summary is the one Jira would get.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import Incident
from models.chat_message import route
from models.dossier import title
from models.notify import group_key
from models.redact import redact
from models.ticket_policy import TicketState, decide_ticket
from respond.dossier_builder import build_dossier
from respond.sinks.model import IncidentNotice
from respond.sinks.settings import SinkSettings


@dataclass(slots=True)
class SinkOutcomes:
    tickets: list[dict[str, Any]] = field(default_factory=list)  # new tickets (create, link)
    ticket_updates: list[dict[str, Any]] = field(default_factory=list)  # comments, reopens on existing ones
    messages: list[dict[str, Any]] = field(default_factory=list)


def _notice(s: Session, row: Incident, cluster: str) -> IncidentNotice:
    dossier = build_dossier(s, row, [], cluster=cluster)
    labels = {"node": row.node, "family": row.family, "category": row.category}
    if dossier.attribution.namespace:
        labels["namespace"] = dossier.attribution.namespace
    return IncidentNotice(dossier=dossier, previous_incident_id=row.previous_incident_id, labels=labels)


def sink_outcomes(engine: sa.Engine, ticketed: Iterable[str], notified: Iterable[str], settings: SinkSettings,
                  cluster: str) -> SinkOutcomes:
    """The sinks' decisions for the incidents the stream offered them (ids in any order)."""
    want_ticket, want_message = set(ticketed), set(notified)
    out = SinkOutcomes()
    opened: dict[str, TicketState] = {}  # the ticket map this replay builds
    with Session(engine) as s:
        rows = s.scalars(sa.select(Incident).where(Incident.incident_id.in_(want_ticket | want_message))
                         .order_by(Incident.first_seen, Incident.incident_id)).all()
        for row in rows:
            notice = _notice(s, row, cluster)
            if row.incident_id in want_ticket:
                _ticket(notice, opened, out, settings, _utc(row.first_seen))
            if row.incident_id in want_message:
                d = notice.dossier
                channel, why = route(d.category, d.attribution.namespace, notice.namespace_meta, settings.routing)
                group = f"{channel}:{group_key(notice.alert_labels(), settings.group_by)}"
                out.messages.append({"incident_id": row.incident_id, "channel": channel, "group": group,
                                     "reason": why})
    return out


def _ticket(notice: IncidentNotice, opened: dict[str, TicketState], out: SinkOutcomes, settings: SinkSettings,
            now: datetime) -> None:
    subject = replace(notice.subject(), status="open")  # as it was when the stream asked for its ticket
    state = opened.get(subject.incident_id)
    previous = opened.get(subject.previous_incident_id) if subject.previous_incident_id else None
    d = decide_ticket(subject, state, previous, now, settings.ticket_policy)
    if d.action == "none":
        return
    if d.action in ("create", "link"):
        assert d.fields is not None
        key = f"{d.fields.project}-replay-{len(out.tickets) + 1}"
        opened[subject.incident_id] = TicketState(key=key, created_at=now, category=subject.category,
                                                  count=subject.count)
        out.tickets.append({"incident_id": subject.incident_id, "summary": redact(title(notice.dossier)),
                            "action": d.action, "key": key, "project": d.fields.project,
                            "priority": d.fields.priority, "reason": d.reason})
        return
    out.ticket_updates.append({"incident_id": subject.incident_id, "action": d.action, "key": d.key,
                               "reason": d.reason})


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
