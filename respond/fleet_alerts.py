"""A tripped cordon breaker raises a fleet incident: the executor's `on_fleet_alert` callback.

The trip is written as an incident of component `fleet` with component id `breaker`
(`history.fleet_incidents.record_breaker_trip`, keyed by the trip's time, so a repeated call
writes nothing new), and its notice is queued for the ticket sink and the chat notifier. Their
loops in the responder (`drain_tickets`, the chat flush) send the ticket and the message to the
infrastructure channel: the callback runs on the cordon path and never waits on Jira or Slack.
Queueing is idempotent per incident, so a repeated call never makes a second ticket or message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.fleet_incidents import record_breaker_trip
from history.tables import Incident
from respond.cordon.action_log import ActionStore
from respond.cordon.executor import FleetAlert
from respond.dossier_builder import build_dossier
from respond.responder import Responder
from respond.sinks.build import Sinks
from respond.sinks.model import IncidentNotice

log = logging.getLogger(__name__)

CORDON_WINDOW = timedelta(hours=1)  # the breaker's rate window: the cordons a trip's incident lists
_RECENT_ACTIONS = 1000  # action records read for them


def utcnow() -> datetime:
    return datetime.now(UTC)


class BreakerTrips:
    """The executor's `on_fleet_alert`: call it with the `FleetAlert` of a trip."""

    def __init__(self, engine: sa.Engine, sinks: Sinks, actions: ActionStore, cluster: str,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.sinks = sinks
        self.actions = actions
        self.cluster = cluster
        self.clock = clock

    def __call__(self, alert: FleetAlert) -> None:
        self.raise_incident(alert)

    def raise_incident(self, alert: FleetAlert) -> str | None:
        """Write the trip's fleet incident and queue its ticket and message; returns its id (None: it
        could not be written or queued, which is logged)."""
        ctx = {"node": alert.node, "incident": alert.incident_id, "pool": alert.pool}
        try:
            incident_id, created = self._record(alert)
            notice = self._notice(incident_id)
            self.sinks.tickets.enqueue(notice)
            self.sinks.chat.enqueue(notice)
            self.sinks.pages.enqueue(notice)
        except Exception:  # the cordon path goes on; the trip itself is in the action record and the log
            log.exception("breaker trip: the fleet incident could not be written or queued", extra=ctx)
            return None
        log.error("breaker trip raised fleet incident %s%s", incident_id, "" if created else " (already raised)",
                  extra={**ctx, "fleet_incident": incident_id})
        return incident_id

    def _cordoned(self, alert: FleetAlert) -> list[str]:
        """The nodes xidpipe cordoned in the breaker's window before the trip."""
        since = alert.at - CORDON_WINDOW
        return sorted({r.node for r in self.actions.recent(_RECENT_ACTIONS)
                       if r.action == "cordon" and r.outcome == "done" and not r.dry_run and r.node
                       and since <= r.at <= alert.at})

    def _record(self, alert: FleetAlert) -> tuple[str, bool]:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            row, created = record_breaker_trip(
                s, cluster=self.cluster, at=alert.at, pool=alert.pool, reason=alert.reason, family=alert.family,
                node=alert.node, incident_id=alert.incident_id, cordoned=self._cordoned(alert), now=self.clock())
            return row.incident_id, created

    def _notice(self, incident_id: str) -> IncidentNotice:
        with Session(self.engine) as s:
            row = s.get(Incident, incident_id)
            if row is None:
                raise LookupError(f"fleet incident {incident_id} is not in the database")
            dossier = build_dossier(s, row, cluster=self.cluster)
            labels = {"node": row.node, "family": row.family, "category": row.category, "component": "fleet"}
            return IncidentNotice(dossier=dossier, labels=labels)


def wire_breaker_trips(responder: Responder) -> None:
    """Make the responder's executor raise a fleet incident on a breaker trip (unless a callback is set)."""
    executor = responder.executor
    if executor.on_fleet_alert is None:
        executor.on_fleet_alert = BreakerTrips(responder.engine, responder.sinks, executor.store,
                                               responder.cluster)
