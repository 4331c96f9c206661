"""What a cordon decision is asked about an incident, read from the history: one request for the
responder and for `xidpipe replay`, so both decide on the same facts.

- Occurrences: when the incident's component had its faults (the reports that counted an
  occurrence, `fault_events.counted` true or NULL), across that component's incidents, within the
  policy's longest window: an incident resolved after its quiet period and reopened by the next
  fault still counts both ("contained ECC twice in a day").
- Pods: the incident's `pods` list and its fault events' namespace/pod, for the GPU-scoped drain.
- Codes: the incident's stored codes ("Xid 79") as the values the decision takes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import incident_state
from history.tables import FaultEvent, Incident
from models.cordon import CordonRequest, PodRef, cordon_request_for
from models.vocabulary import FaultCode, stored_code

OCCURRENCES_READ = 1000  # the latest occurrences read per request (a storm's incident may have many more)


def cordon_request(s: Session, row: Incident, longest_window_s: float) -> CordonRequest:
    """The cordon request for the incident `row` as it stands now."""
    since = row.last_seen - timedelta(seconds=longest_window_s)
    return cordon_request_for(incident_state(row), codes=incident_codes(row), pods=incident_pods(s, row),
                              occurrences=component_occurrences(s, row.fingerprint, since, row.last_seen))


def incident_codes(row: Incident) -> tuple[FaultCode, ...]:
    """The numbered codes the incident's faults carried, in the order it saw them."""
    return tuple(code for text in row.codes or () if (code := stored_code(str(text))) is not None)


def component_occurrences(s: Session, fingerprint: str, since: datetime, until: datetime) -> tuple[datetime, ...]:
    """When the component of incidents with `fingerprint` had its faults, from `since` to `until`."""
    ids = sa.select(Incident.incident_id).where(Incident.fingerprint == fingerprint).scalar_subquery()
    q = (sa.select(FaultEvent.occurred_at)
         .where(FaultEvent.incident_id.in_(ids), FaultEvent.occurred_at >= since, FaultEvent.occurred_at <= until,
                FaultEvent.counted.is_not(False))
         .order_by(FaultEvent.occurred_at.desc()).limit(OCCURRENCES_READ))
    return tuple(sorted(s.scalars(q)))


def incident_pods(s: Session, row: Incident) -> tuple[PodRef, ...]:
    """The pods the incident's faults hit: its `pods` list (namespace/pod/container) and its fault events."""
    found: dict[tuple[str, str], None] = {}
    for entry in row.pods or ():
        parts = str(entry).split("/")
        if len(parts) >= 2 and parts[0] and parts[1]:
            found[(parts[0], parts[1])] = None
    q = (sa.select(FaultEvent.namespace, FaultEvent.pod).distinct()
         .where(FaultEvent.incident_id == row.incident_id, FaultEvent.pod.is_not(None),
                FaultEvent.namespace.is_not(None)))
    for namespace, pod in s.execute(q):
        if namespace and pod:
            found[(namespace, pod)] = None
    return tuple(PodRef(namespace=ns, name=name) for ns, name in found)
