"""What the tests read back from a stream store's database: its incidents, fault events, fleet
incidents and row counts, as dicts (the services read through `history`; the demo, replay and
`run_pipeline_once` through `history.incident_rows.all_incidents`)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.incident_rows import all_incidents, incident_to_dict, row_dict
from history.tables import FaultEvent, Incident, metadata
from streams.store import Store


def incidents(store: Store) -> list[dict[str, Any]]:
    """Every incident, in the order they opened."""
    return all_incidents(store.engine)


def fault_events(store: Store) -> list[dict[str, Any]]:
    """Every fault event, in the order stored."""
    with Session(store.engine) as s:
        return [row_dict(r) for r in s.scalars(sa.select(FaultEvent).order_by(FaultEvent.id))]


def fleet_incidents(store: Store) -> list[dict[str, Any]]:
    """The incidents of component `fleet`, oldest first."""
    with Session(store.engine) as s:
        return [incident_to_dict(r) for r in s.scalars(sa.select(Incident).where(Incident.component == "fleet")
                                                        .order_by(Incident.first_seen, Incident.incident_id))]


def counts(store: Store) -> dict[str, int]:
    """Rows per table."""
    with Session(store.engine) as s:
        return {t.name: int(s.execute(sa.select(sa.func.count()).select_from(t)).scalar() or 0)
                for t in metadata.sorted_tables}
