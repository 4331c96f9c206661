"""A small incident history written by the real pipeline code: the stream store groups and
classifies the faults, the ledger is built from the stored inventories, and one card is swapped."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.ledger_store import apply_inventory, rebuild_ledger
from history.tables import Incident
from models.ledger import GpuSighting
from models.stream_policy import PipelinePolicy
from streams.items import ItemMapper
from streams.store import Store
from tests.streams.records import T0, Kmsg, inventory, pci, pods, s, serial, uuid

DAY0 = T0 - timedelta(days=3)  # 2026-11-26 12:00 UTC
SWAP_AT = DAY0 + timedelta(days=2, hours=6)
NEW_SERIAL = "1654923099999"
HOSTILE_PROCESS = "<script>x</script>"  # a process name that must be escaped on every page


@dataclass(frozen=True)
class Seeded:
    url: str
    bert: str  # node-a GPU 0: Xid 13 and 43 from pod bert-1 (application)
    hostile: str  # node-a GPU 1: Xid 31 from a process whose name is markup (application)
    lost_b: str  # node-b GPU 2: Xid 79, fallen off the bus (hardware); the card is replaced afterwards
    dbe_b: str  # node-b GPU 1: Xid 48 (hardware), a day after DAY0
    lost_c: str  # node-c GPU 0: Xid 79 (hardware), two days after DAY0
    swapped_serial: str
    bert_serial: str


def seed(url: str) -> Seeded:
    """Writes the history to `url`; returns the ids the tests look for."""
    store = Store(url, PipelinePolicy())
    store.create_schema()
    a, b, c = Kmsg("node-a"), Kmsg("node-b"), Kmsg("node-c")
    records = [
        inventory("node-a", DAY0), inventory("node-b", DAY0), inventory("node-c", DAY0),
        pods("node-a", DAY0, {0: ("team-nlp", "bert-1", "main"), 1: ("team-cv", "resnet-1", "main")}),
        a.xid(0, 13, DAY0 + s(10), 11, "bert"), a.xid(0, 43, DAY0 + s(11), 11, "bert"),
        a.xid(1, 31, DAY0 + s(20), 12, HOSTILE_PROCESS),
        b.xid(2, 79, DAY0 + timedelta(days=1)),
        b.xid(1, 48, DAY0 + timedelta(days=1, hours=2), text="An uncorrectable double bit error"),
        c.xid(0, 79, DAY0 + timedelta(days=2)),
    ]
    mapper = ItemMapper()
    items = [it for r in records for it in mapper.items(r, "topic")] + mapper.flush_all()
    store.process(items, now=DAY0 + timedelta(days=2, hours=1))
    with Session(store.engine) as session, session.begin():
        rebuild_ledger(session)
        # node-b's GPU 2 (it fell off the bus) is replaced by a new card in the same slot.
        cards = [GpuSighting(uuid=uuid("node-b", i), pci_slot=pci(i), serial=serial("node-b", i),
                             name="NVIDIA H100 80GB HBM3") for i in (0, 1, 3)]
        cards.append(GpuSighting(uuid="GPU-new-card-0000-4000-8000-000000000002", pci_slot=pci(2),
                                 serial=NEW_SERIAL, name="NVIDIA H100 80GB HBM3"))
        apply_inventory(session, "node-b", SWAP_AT, cards)
    with Session(store.engine) as session:
        ids = {(node, tuple(codes)): incident_id for node, codes, incident_id in
               session.execute(sa.select(Incident.node, Incident.codes, Incident.incident_id))}
    store.dispose()
    return Seeded(
        url=url, bert=ids["node-a", ("Xid 13", "Xid 43")], hostile=ids["node-a", ("Xid 31",)],
        lost_b=ids["node-b", ("Xid 79",)], dbe_b=ids["node-b", ("Xid 48",)], lost_c=ids["node-c", ("Xid 79",)],
        swapped_serial=serial("node-b", 2), bert_serial=serial("node-a", 0),
    )
