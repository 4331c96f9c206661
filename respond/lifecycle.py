"""The incident lifecycle states the responder records: `mitigated` once it really cordoned a node
(or quarantined a GPU) for an incident, `ticketed` once the incident has a ticket (Jira or the file outbox), and,
from the remediation loop (`respond.remediation`), `repaired` once it returned the node after validation
and `rma` once its ladder marked the card.

Each is recorded at most once per incident (`models.lifecycle`: the lifecycle only moves forward,
and `incident_transitions` holds one row per state entered), so redelivered requests and repeated
ticket updates change nothing. A state the incident has passed already is not recorded. (The steps
that act on a node after the cordon decision are another thing: `respond.cordon.steps`.)
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from history.transitions import record_responder_step
from respond.cordon.executor import ActionResult

log = logging.getLogger(__name__)

ACTOR = "xidpipe-respond"


def cordoned(result: ActionResult) -> bool:
    """Did this cordon result change the cluster (not a dry run, a refusal or somebody else's cordon)? A
    GPU's quarantine mitigates its incident as a cordon does."""
    return result.action in ("cordon", "quarantine") and result.outcome == "done" and not result.dry_run


def record_lifecycle_step(engine: sa.Engine, incident_id: str, to: str, reason: str,
                          at: datetime | None = None) -> bool:
    """Record the incident's lifecycle state `to`, entered by the responder; True when it was recorded now."""
    with Session(engine) as s:
        try:
            step = record_responder_step(s, incident_id, to, reason=reason, actor=ACTOR,
                                         at=at or datetime.now(UTC))
            if step is None:
                s.rollback()
                return False
            s.commit()
        except IntegrityError:  # recorded by another responder at the same moment
            s.rollback()
            return False
    log.info("incident %s %s: %s", incident_id, to, reason, extra={"incident": incident_id, "lifecycle": to})
    return True
