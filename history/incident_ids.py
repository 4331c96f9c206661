"""Incidents by the names people give them, and the short ids the tables show (`models.incident_ref`).

`resolve_incident` takes the full id, a ticket's form of it, the bare fingerprint, the hex without its
version, or a unique prefix of any of these. `short_ids` gives a page of incidents their shortest
unique prefixes from the ids next to each in the primary key's order: two index probes per incident
and version, in one statement, however large the history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import Incident
from models.incident_ref import id_prefixes, probe_keys, short_id, strip_version

CANDIDATES = 10  # an ambiguous name lists this many incidents
TYPED_MIN = 4  # as git: a shorter prefix of the hex is too easily someone else's incident


class AmbiguousIdent(LookupError):
    """A prefix names more than one incident or card; `candidates` lists some of them."""

    def __init__(self, ident: str, candidates: list[str], what: str = "incidents") -> None:
        more = len(candidates) > CANDIDATES
        shown = ", ".join(candidates[:CANDIDATES]) + (", ..." if more else "")
        super().__init__(f"{ident!r} is ambiguous: {'more than ' if more else ''}"
                         f"{min(len(candidates), CANDIDATES)} {what} match it: {shown}")
        self.candidates = candidates


def _matching(s: Session, prefix: str) -> list[Incident]:
    return list(s.scalars(sa.select(Incident).where(
        sa.or_(Incident.incident_id.startswith(prefix, autoescape=True),
               Incident.fingerprint.startswith(prefix, autoescape=True)))
        .order_by(Incident.opened_at.desc(), Incident.incident_id).limit(CANDIDATES + 1)))


def resolve_incident(s: Session, ident: str) -> Incident:
    """The incident `ident` names (see the module). Raises `LookupError` when none matches and
    `AmbiguousIdent`, with the candidates, when several do: a prefix of several ids, or a fingerprint
    of several incidents (a recurrence, a merged one)."""
    row = s.get(Incident, ident)
    if row is not None:
        return row
    prefixes = tuple(p for p in id_prefixes(ident) if len(strip_version(p)) >= TYPED_MIN or p == ident)
    for prefix in prefixes:
        row = s.get(Incident, prefix)
        if row is not None:
            return row
    matches: dict[str, Incident] = {}
    for prefix in dict.fromkeys((*prefixes, ident)):  # what was typed, as typed, last
        if prefix:
            matches.update((m.incident_id, m) for m in _matching(s, prefix))
    if len(matches) == 1:
        return next(iter(matches.values()))
    if not matches:
        short = len(strip_version(ident.strip())) < TYPED_MIN
        raise LookupError(f"no incident {ident!r}" + (f" (a prefix takes at least {TYPED_MIN} characters)"
                                                       if short else ""))
    ordered = sorted(matches.values(), key=lambda m: (m.opened_at, m.incident_id), reverse=True)
    raise AmbiguousIdent(ident, [_candidate(m) for m in ordered])


def _candidate(m: Incident) -> str:
    merged = f", merged into {m.merged_into}" if m.merged_into else ""
    return f"{m.incident_id} ({m.node} {m.family} {m.category}{merged})"


def find_incident(s: Session, ident: str) -> Incident | None:
    """`resolve_incident`, or None when no incident or several match."""
    try:
        return resolve_incident(s, ident)
    except LookupError:
        return None


def short_ids(s: Session, ids: Sequence[str]) -> dict[str, str]:
    """Each id's short id: the shortest prefix of it without its version, at least
    `models.incident_ref.SHORT_ID_MIN` characters, that no other incident's id starts with."""
    keys = [(incident_id, key) for incident_id in dict.fromkeys(ids) for key in probe_keys(incident_id)]
    if not keys:
        return {}
    probes: list[Any] = []
    for _, key in keys:
        probes.append(sa.select(sa.func.max(Incident.incident_id)).where(Incident.incident_id < key)
                      .scalar_subquery())
        probes.append(sa.select(sa.func.min(Incident.incident_id)).where(Incident.incident_id > key)
                      .scalar_subquery())
    near: dict[str, list[str]] = {}
    for start in range(0, len(probes), 200):  # a statement's columns stay few
        chunk = probes[start:start + 200]
        values = s.execute(sa.select(*chunk)).one()
        for n, value in enumerate(values):
            if value is not None:
                near.setdefault(keys[(start + n) // 2][0], []).append(str(value))
    return {incident_id: short_id(incident_id, near.get(incident_id, ())) for incident_id, _ in keys}
