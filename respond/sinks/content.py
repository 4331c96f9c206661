"""What the generic sinks hand a destination: destination-neutral content, which each destination
renders in its own format.

- A ticket's description: `ports.TicketBody`, the dossier as a `models.render.doc` document.
- A chat message: `models.chat_message.GroupMessage` (a group's latest incident in full and every
  incident of the group) or `GroupReply` (a reply in the group's thread), built here from the
  group's notices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import quote

from models.chat_message import GroupMessage, GroupReply, group_entry, message_content
from models.redact import redact
from respond.sinks.model import IncidentNotice


def incident_page(base: str | None, incident_id: str) -> str | None:
    """The incident's page under `base` (`xidpipe serve`: /incidents/<id>), or None without a base."""
    if not base:
        return None
    return f"{base.rstrip('/')}/incidents/{quote(incident_id, safe=':@')}"


def group_message(notices: Sequence[IncidentNotice], ticket_url: Callable[[str], str | None],
                  incident_url_base: str | None = None, group_key: str = "") -> GroupMessage:
    """The message of the group `group_key` from its notices (in the group's order): the latest
    incident in full, with its ticket's link, and one entry per incident."""
    latest = max(notices, key=lambda n: (n.dossier.last_seen, n.incident_id))
    content = message_content(latest.dossier, ticket_url(latest.incident_id),
                              incident_page(incident_url_base, latest.incident_id))
    entries = tuple(group_entry(n.dossier, n.alert_status, incident_page(incident_url_base, n.incident_id))
                    for n in notices)
    return GroupMessage(content, entries, group_key)


def group_reply(reason: str, group: GroupMessage) -> GroupReply:
    """A reply in the group's thread: `reason` is why the group is told again (the notify decision's)."""
    return GroupReply(redact(reason), group)
