"""The per-incident rows behind the history's Xid and namespace filters: `incident_codes` and
`incident_namespaces` (`history.tables`), one row per distinct (incident, code) and (incident,
namespace), written in the batch's transaction. A pair already stored is ignored (`ON CONFLICT DO
NOTHING`), so a redelivered batch or a storm that repeats one code adds nothing."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from history.tables import IncidentCode, IncidentNamespace


class IncidentIndex:
    """Collects the pairs one batch produces; `write()` inserts the new ones."""

    __slots__ = ("codes", "namespaces")

    def __init__(self) -> None:
        self.codes: dict[tuple[str, str], int | None] = {}
        self.namespaces: set[tuple[str, str]] = set()

    def add(self, incident_id: str, code: str, xid: int | None, namespace: str | None) -> None:
        self.codes.setdefault((incident_id, code[:64]), xid)
        if namespace:
            self.namespaces.add((incident_id, namespace))

    def write(self, s: Session) -> None:
        _insert_new(s, IncidentCode.__table__, [{"incident_id": i, "code": c, "xid": x}
                                                for (i, c), x in self.codes.items()])
        _insert_new(s, IncidentNamespace.__table__, [{"incident_id": i, "namespace": n} for i, n in self.namespaces])
        self.codes.clear()
        self.namespaces.clear()


def _insert_new(s: Session, table: Any, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    dialect = s.get_bind().dialect.name
    if dialect == "postgresql":
        s.execute(postgresql.insert(table).on_conflict_do_nothing(), rows)
    elif dialect == "sqlite":
        s.execute(sqlite.insert(table).on_conflict_do_nothing(), rows)
    else:
        raise RuntimeError(f"the incident history runs on PostgreSQL or SQLite, not {dialect}")
