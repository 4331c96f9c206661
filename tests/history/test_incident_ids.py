"""Incidents by every name, and short ids, over a history the real store wrote: a card that failed,
was closed and failed again (two incidents, one fingerprint), and an incident under an older
fingerprint version whose hex starts the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, make_transient

from history.engine import make_engine
from history.incident_ids import AmbiguousIdent, find_incident, resolve_incident, short_ids
from history.tables import Incident
from models.stream_policy import PipelinePolicy
from streams.store import Store
from tests.history.test_lifecycle_and_gpus import feed
from tests.streams.records import T0, Kmsg, inventory, s
from xidpipe.cli import main


@pytest.fixture
def recurred(tmp_path: Path) -> tuple[str, list[str]]:
    """node-b's GPU fell off the bus, was closed, and fell off again: the ids of both, oldest first."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = Store(url, PipelinePolicy())
    store.create_schema()
    feed(store, [inventory("node-b", T0), Kmsg("node-b").xid(2, 79, T0 + s(30))])
    engine = make_engine(url)
    with Session(engine) as db:
        (first,) = db.scalars(sa.select(Incident.incident_id)).all()
    assert main(["incidents", "transition", first, "closed", "--reason", "reseated", "--database-url", url]) == 0
    feed(store, [Kmsg("node-b", seq=5000).xid(2, 79, T0 + s(3630))])
    store.dispose()
    with Session(engine) as db:
        ids = list(db.scalars(sa.select(Incident.incident_id).order_by(Incident.opened_at)))
    engine.dispose()
    return url, ids


def test_a_recurrence_shares_the_fingerprint_and_gets_a_longer_short_id(recurred: tuple[str, list[str]]) -> None:
    url, (first, again) = recurred
    engine = make_engine(url)
    with Session(engine) as db:
        fingerprint = first.split("@")[0]
        assert again.startswith(fingerprint + "@")
        short = short_ids(db, [first, again])
        # The hex is the same: each short id goes on into its opening time, as far as it must.
        assert short[first] != short[again] and all(v.startswith(fingerprint[3:] + "@") for v in short.values())
        for ident, name in short.items():
            assert resolve_incident(db, name).incident_id == ident
        # The bare fingerprint names both: ambiguous, with both listed.
        with pytest.raises(AmbiguousIdent) as err:
            resolve_incident(db, fingerprint)
        assert first in str(err.value) and again in str(err.value) and find_incident(db, fingerprint) is None
    engine.dispose()


def test_short_ids_look_past_the_version(recurred: tuple[str, list[str]]) -> None:
    url, (first, _) = recurred
    engine = make_engine(url)
    hexpart = first[3:19]
    older = f"v1:{hexpart[:9]}000000@20200101T000000.000000Z"
    with Session(engine) as db:
        row = db.get(Incident, first)
        assert row is not None
        db.expunge(row)
        make_transient(row)
        row.incident_id, row.fingerprint, row.status = older, older.split("@")[0], "resolved"
        db.add(row)
        db.commit()
        short = short_ids(db, [first, older])
        assert short[first].startswith(hexpart[:10]) and short[older] == f"{hexpart[:9]}0"
        assert resolve_incident(db, short[older]).incident_id == older
        with pytest.raises(AmbiguousIdent):
            resolve_incident(db, hexpart[:9])  # both versions' ids start so
        assert resolve_incident(db, "v1:" + hexpart[:4]).incident_id == older  # a version given narrows it
    engine.dispose()
