"""What a cordon decision is asked about an incident, read from the history: one request for the
responder and for `xidpipe replay`, so both decide on the same facts.

- Occurrences: when the incident's component had its faults (the reports that counted an
  occurrence, `fault_events.counted` true or NULL), across that component's incidents, within the
  policy's longest window: an incident resolved after its quiet period and reopened by the next
  fault still counts both ("contained ECC twice in a day"). Each with what it was (`Occurrence`):
  the Xids of its reports (the one that counted it and the views that joined it after it) and the
  family of the one that counted it, so that a rule counts only the occurrences its match selects.
- Pods: the incident's `pods` list and its fault events' namespace/pod, for the GPU-scoped drain.
- Codes: the incident's stored codes ("Xid 79") as the values the decision takes.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import incident_state
from history.tables import FaultEvent, Incident
from models.cordon import CordonRequest, Occurrence, PodRef, cordon_request_for
from models.vocabulary import FAMILIES, Family, FaultCode, stored_code

OCCURRENCES_READ = 1000  # the latest occurrences read per request (a storm's incident may have many more)


def cordon_request(s: Session, row: Incident, longest_window_s: float) -> CordonRequest:
    """The cordon request for the incident `row` as it stands now."""
    since = row.last_seen - timedelta(seconds=longest_window_s)
    return cordon_request_for(incident_state(row), codes=incident_codes(row), pods=incident_pods(s, row),
                              occurrence_facts=component_occurrences(s, row.fingerprint, since, row.last_seen))


def incident_codes(row: Incident) -> tuple[FaultCode, ...]:
    """The numbered codes the incident's faults carried, in the order it saw them."""
    return tuple(code for text in row.codes or () if (code := stored_code(str(text))) is not None)


def component_occurrences(s: Session, fingerprint: str, since: datetime, until: datetime) -> tuple[Occurrence, ...]:
    """The occurrences of the component of incidents with `fingerprint` from `since` to `until`, oldest
    first: each report that counted one, with the Xids of the reports that joined it after it."""
    ids = sa.select(Incident.incident_id).where(Incident.fingerprint == fingerprint).scalar_subquery()
    q = (sa.select(FaultEvent.occurred_at, FaultEvent.xid, FaultEvent.family, FaultEvent.counted)
         .where(FaultEvent.incident_id.in_(ids), FaultEvent.occurred_at >= since, FaultEvent.occurred_at <= until)
         .order_by(FaultEvent.occurred_at.desc(), FaultEvent.id.desc()).limit(OCCURRENCES_READ * 4))
    found: list[Occurrence] = []
    for at, xid, family, counted in reversed(s.execute(q).all()):
        if counted is not False:
            found.append(Occurrence(at=at, xids=(xid,) if xid is not None else (),
                                    family=Family(family) if family in FAMILIES else None))
        elif found and xid is not None and xid not in found[-1].xids:  # another view of the one before
            found[-1] = found[-1].model_copy(update={"xids": (*found[-1].xids, xid)})
    return tuple(found[-OCCURRENCES_READ:])


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
