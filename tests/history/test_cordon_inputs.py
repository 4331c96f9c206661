"""The cordon request read from the history: the numbers of the Xids the incident's faults carried, in
the order it saw them, from the codes the store wrote (`history.cordon_inputs`)."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.cordon_inputs import cordon_request, incident_codes
from history.engine import make_engine
from history.tables import Incident
from models.stream_policy import PipelinePolicy
from models.vocabulary import CodeKind, FaultCode
from streams.store import Store
from tests.history.test_lifecycle_and_gpus import feed
from tests.streams.records import T0, Kmsg, inventory, pci, s


def test_a_request_carries_the_xids_of_the_stored_codes_in_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = Store(url, PipelinePolicy())
    store.create_schema()
    k = Kmsg("node-a")
    feed(store, [inventory("node-a", T0),
                 k.xid(2, 79, T0 + s(1), text="GPU has fallen off the bus."),
                 k.line(f"NVRM: GPU {pci(2)}: GPU has fallen off the bus.", T0 + s(1.1)),
                 k.xid(2, 48, T0 + s(300), text="An uncorrectable double bit error (DBE) has been detected.")])
    store.dispose()
    engine = make_engine(url)
    with Session(engine) as session:
        row = session.scalars(sa.select(Incident).where(Incident.node == "node-a")).one()
        request = cordon_request(session, row, longest_window_s=86_400)
    engine.dispose()

    assert row.codes == ["Xid 79", "fallen off the bus", "Xid 48"]
    assert incident_codes(row) == (FaultCode(CodeKind.XID, 79), FaultCode(CodeKind.XID, 48))
    assert (request.xids, request.immediate_actions) == ((79, 48), ("RESTART_BM", "WORKFLOW_XID_48"))
    assert (request.family, request.count, len(request.occurrences)) == ("gpu_lost", 2, 2)


def test_a_request_says_what_each_occurrence_was(tmp_path: Path) -> None:
    """Three jobs crash on one GPU (Xid 13), then a contained ECC error comes with a DBE (Xid 94, 48, 63 within
    seconds: one occurrence): the request's occurrences carry their Xids and family, so that a rule counts
    what its match selects (`models.cordon.occurrences_in_window`)."""
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = Store(url, PipelinePolicy())
    store.create_schema()
    k = Kmsg("node-a")
    feed(store, [inventory("node-a", T0),
                 k.xid(1, 13, T0 + s(10), 11, "a"), k.xid(1, 13, T0 + s(900), 12, "b"),
                 k.xid(1, 13, T0 + s(1800), 13, "c"),
                 k.xid(1, 94, T0 + s(3000), 14, "c", text="Contained: SM (0x1). RST: No, D-RST: No"),
                 k.xid(1, 48, T0 + s(3005), text="An uncorrectable double bit error (DBE) has been detected."),
                 k.xid(1, 63, T0 + s(3006), text="Row Remapper: New row marked for remapping, reset gpu to activate.")])
    store.dispose()
    engine = make_engine(url)
    with Session(engine) as session:
        row = session.scalars(sa.select(Incident).where(Incident.node == "node-a")).one()
        request = cordon_request(session, row, longest_window_s=86_400)
    engine.dispose()

    assert [(o.xids, o.family) for o in request.occurrence_facts] == [
        ((13,), "application"), ((13,), "application"), ((13,), "application"), ((94, 48, 63), "memory")]
    assert request.count == 4 and len(request.occurrences) == 4
