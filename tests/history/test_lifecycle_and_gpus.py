"""The lifecycle, the GPU ledger and their commands over a history the real store wrote:
`xidpipe incidents transition|list --lifecycle|show`, `xidpipe gpus list|history|rebuild`, `xidpipe stats`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from history.queries import heatmap
from models.node_records import NodeRecord
from models.stream_policy import PipelinePolicy
from streams.items import ItemMapper
from streams.store import Store
from tests.streams.records import T0, Kmsg, inventory, pods, s, serial, uuid
from xidpipe.cli import main

MODEL = "NVIDIA H100 80GB HBM3"


def feed(store: Store, records: Iterable[NodeRecord]) -> None:
    mapper = ItemMapper()
    items = [it for r in records for it in mapper.items(r, "topic")] + mapper.flush_all()
    store.process(items)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = Store(url, PipelinePolicy())
    store.create_schema()
    a, b = Kmsg("node-a"), Kmsg("node-b")
    feed(store, [
        inventory("node-a", T0), inventory("node-b", T0),
        pods("node-a", T0, {0: ("team-nlp", "bert-1", "main")}),
        a.xid(0, 13, T0 + s(10), 11, "bert"), a.xid(0, 43, T0 + s(70), 11, "bert"),
        b.xid(2, 79, T0 + s(30)),
    ])
    store.dispose()
    assert main(["gpus", "rebuild", "--database-url", url]) == 0
    return url


def cli(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> str:
    assert main(list(args)) == code
    out = capsys.readouterr()
    return out.out if code == 0 else out.err


def js(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    return json.loads(cli(capsys, *args, "--json"))


def incident_of(capsys: pytest.CaptureFixture[str], db: str, node: str) -> dict[str, Any]:
    (inc,) = js(capsys, "incidents", "list", "--database-url", db, "--node", node)["incidents"]
    return dict(inc)


def test_people_move_incidents_along_the_lifecycle(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    inc = incident_of(capsys, db, "node-b")
    assert inc["lifecycle"] == "open"
    ident = inc["incident_id"]
    step = js(capsys, "incidents", "transition", ident, "rma", "--reason", "Xid 79 twice: card sent back",
              "--actor", "alice", "--database-url", db)
    assert (step["from"], step["to"], step["actor"]) == ("open", "rma", "alice")
    listed = js(capsys, "incidents", "list", "--database-url", db, "--lifecycle", "rma")["incidents"]
    assert [i["incident_id"] for i in listed] == [ident] and listed[0]["status"] == "resolved"
    assert js(capsys, "incidents", "list", "--database-url", db, "--lifecycle", "open")["total"] == 1

    err = cli(capsys, "incidents", "transition", ident, "repaired", "--reason", "x", "--database-url", db, code=4)
    assert "rma → repaired is not allowed" in err and "returned, closed" in err
    err = cli(capsys, "incidents", "transition", "v1:none", "closed", "--reason", "x", "--database-url", db, code=2)
    assert "no incident 'v1:none'" in err
    # argparse: people do not record mitigated
    assert main(["incidents", "transition", ident, "mitigated", "--reason", "x", "--database-url", db]) == 2
    assert "unknown lifecycle step 'mitigated'" in capsys.readouterr().err

    out = cli(capsys, "incidents", "transition", ident[:14], "returned", "--reason", "back from RMA",
              "--database-url", db)
    assert "rma → returned" in out
    show = js(capsys, "incidents", "show", ident, "--database-url", db)
    assert show["lifecycle"] == "returned"
    assert [(t["from"], t["to"]) for t in show["transitions"]] == [("open", "rma"), ("rma", "returned")]
    assert show["actions"] == [] and show["tickets"] == [] and show["notifications"] == []
    text = cli(capsys, "incidents", "show", ident, "--database-url", db)
    assert "Lifecycle: returned (stream status: resolved)" in text
    assert "lifecycle open → rma by alice: Xid 79 twice: card sent back" in text


def test_a_fault_after_closing_opens_a_linked_incident(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = incident_of(capsys, db, "node-b")
    cli(capsys, "incidents", "transition", first["incident_id"], "closed", "--reason", "reseated",
        "--database-url", db)
    store = Store(db, PipelinePolicy())
    feed(store, [Kmsg("node-b", seq=5000).xid(2, 79, T0 + s(90))])  # well within the quiet period
    store.dispose()
    rows = js(capsys, "incidents", "list", "--database-url", db, "--node", "node-b", "--sort", "first_seen")
    new, old = rows["incidents"]
    assert old["incident_id"] == first["incident_id"] and old["lifecycle"] == "closed"
    assert new["previous_incident_id"] == first["incident_id"]
    assert (new["status"], new["lifecycle"]) == ("open", "open")


def test_gpus_list_and_history(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = js(capsys, "gpus", "list", "--database-url", db)
    assert data["total"] == 8
    by_serial = {g["serial"]: g for g in data["gpus"]}
    a0 = by_serial[serial("node-a", 0)]
    assert (a0["node"], a0["pci_slot"], a0["model"], a0["state"], a0["uuid"]) == (
        "node-a", "0000:18:00.0", MODEL, "in_service", uuid("node-a", 0))
    assert (a0["incidents"], a0["hardware_incidents"]) == (1, 0)
    b2 = by_serial[serial("node-b", 2)]
    assert (b2["incidents"], b2["hardware_incidents"]) == (1, 1)
    assert js(capsys, "gpus", "list", "--database-url", db, "--node", "node-b", "--model", "h100")["total"] == 4
    assert js(capsys, "gpus", "list", "--database-url", db, "--state", "retired")["total"] == 0
    table = cli(capsys, "gpus", "list", "--database-url", db, "--limit", "3")
    assert "PCI SLOT" in table and "3 of 8 (offset 0)" in table

    hist = js(capsys, "gpus", "history", uuid("node-b", 2), "--database-url", db)
    assert hist["card"] == f"serial:{serial('node-b', 2)}" and hist["model"] == MODEL
    assert [(p["node"], p["valid_to"]) for p in hist["placements"]] == [("node-b", None)]
    assert [e["kind"] for e in hist["events"]] == ["placed"]
    assert [(i["family"], i["category"]) for i in hist["incidents"]] == [("gpu_lost", "hardware")]
    text = cli(capsys, "gpus", "history", serial("node-b", 2), "--database-url", db)
    assert "Placements" in text and "placed" in text and re.search(r"gpu_lost +hardware", text)
    err = cli(capsys, "gpus", "history", "no-such-card", "--database-url", db, code=2)
    assert "no card 'no-such-card'" in err


def test_a_swap_reaches_the_ledger_through_the_worker(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    swapped = inventory("node-b", T0 + timedelta(days=1))
    gpus = list(swapped.gpus)
    gpus[2] = gpus[2].model_copy(update={"serial": "1999000000001", "uuid": "GPU-new-card"})
    store = Store(db, PipelinePolicy())
    feed(store, [swapped.model_copy(update={"gpus": tuple(gpus)})])
    store.dispose()
    # The worker applied the inventory as it stored it: a rebuild finds nothing left to apply.
    assert js(capsys, "gpus", "rebuild", "--database-url", db)["inventories_applied"] == 0
    old = js(capsys, "gpus", "history", serial("node-b", 2), "--database-url", db)
    assert old["state"] == "retired"
    assert [(e["kind"], e["card"], e["previous_card"]) for e in old["events"]] == [
        ("placed", old["card"], None), ("replaced", "serial:1999000000001", old["card"])]
    assert js(capsys, "gpus", "list", "--database-url", db, "--state", "retired")["total"] == 1


def test_a_card_claimed_by_another_node_is_a_conflict_in_gpus_list_and_history(
        db: str, capsys: pytest.CaptureFixture[str]) -> None:
    # node-a's inventory (every node's agent shares one Kafka credential) names node-b's third card.
    forged = inventory("node-a", T0 + timedelta(minutes=5))
    stolen = inventory("node-b", T0).gpus[2]
    store = Store(db, PipelinePolicy())
    feed(store, [forged.model_copy(update={"gpus": (*forged.gpus, stolen.model_copy(
        update={"pci_bus_id": "00000000:DB:00.0"}))})])
    store.dispose()
    card = js(capsys, "gpus", "history", serial("node-b", 2), "--database-url", db)
    assert (card["node"], card["state"], card["claimed_by"]) == ("node-b", "conflict", "node-a")
    assert [p["node"] for p in card["placements"]] == ["node-b"]  # not moved
    (conflict,) = [e for e in card["events"] if e["kind"] == "conflict"]
    assert (conflict["node"], conflict["previous_node"]) == ("node-a", "node-b")
    listed = js(capsys, "gpus", "list", "--database-url", db, "--state", "conflict")["gpus"]
    assert [(g["serial"], g["node"], g["claimed_by"]) for g in listed] == [(serial("node-b", 2), "node-b", "node-a")]
    table = cli(capsys, "gpus", "list", "--database-url", db, "--state", "conflict")
    assert re.search(r"node-b .* conflict,faulted ", table), table  # the status names the conflict
    wide = cli(capsys, "gpus", "list", "--database-url", db, "--state", "conflict", "-o", "wide")
    assert re.search(r"node-b .* conflict: claimed by node-a", wide), wide
    text = cli(capsys, "gpus", "history", serial("node-b", 2), "--database-url", db)
    assert "claimed by node-a" in text and re.search(r"conflict +\S+ is listed by node-a", text), text


def test_stats_separate_incidents_from_events_and_a_storm_counts_once(db: str,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    first = incident_of(capsys, db, "node-b")
    cli(capsys, "incidents", "transition", first["incident_id"], "closed", "--reason", "reseated",
        "--database-url", db)
    store = Store(db, PipelinePolicy())
    a = Kmsg("node-a", seq=7000)
    storm = [a.xid(1, 74, T0 + s(100) + timedelta(milliseconds=100 * n)) for n in range(300)]  # 30 s of NVLink
    feed(store, [*storm, Kmsg("node-b", seq=5000).xid(2, 79, T0 + s(3630))])  # the card fails again an hour on
    store.dispose()

    data = js(capsys, "stats", "--database-url", db)
    inc, ev, rates = data["incidents"], data["fault_events"], data["gpu_rates"]
    assert inc["total"] == 4 and ev["total"] == 304  # the storm: 300 events, one incident
    assert inc["by_component"] == {"gpu": 3, "workload": 1}
    assert ev["by_code"]["Xid 74"] == 300 and inc["by_category"]["interconnect"] == 1
    assert (rates["gpus"], rates["gpus_from"], rates["incidents"]) == (8, "ledger", 3)
    # Between one card's two incidents: 3600 s. Per line it would be the storm's 0.1 s.
    assert rates["mean_time_between_incidents_s"] == 3600.0
    # The history spans an hour (the inventories at T0, the last fault at T0 + 3630 s): the rate is given
    # over that hour, never stretched to 30 days.
    span = rates["span"]
    assert (span["from"], span["to"]) == ((T0).isoformat(), (T0 + s(3630)).isoformat())
    assert span["days"] == round(3630 / 86400, 3) and rates["incidents_per_gpu"] == round(3 / 8, 3)
    assert rates["incidents_per_gpu_per_30d"] is None and "less than 30 days" in rates["note"]
    assert rates["by_model"][MODEL]["incidents"] == 3
    text = cli(capsys, "stats", "--database-url", db)
    assert "Incidents: 4 (a storm of lines is one incident)" in text
    assert "Fault events: 304 (every report of every sensor)" in text
    assert "GPU fault rates over 1.0 hours" in text and "no rate per 30 days" in text
    assert re.search(r"all +8 +3 +0.375 +n/a +60m", text)
    since = js(capsys, "stats", "--database-url", db, "--since", "2026-11-29T12:30:00Z")
    assert since["incidents"]["total"] == 1 and since["since"] == "2026-11-29T12:30:00+00:00"


def test_stats_by_gpu_model_and_heatmap(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = js(capsys, "stats", "--database-url", db)
    assert data["incidents"]["by_gpu_model"] == {MODEL: 2}
    assert "GPU MODEL" in cli(capsys, "stats", "--database-url", db)
    from history.engine import make_engine

    engine = make_engine(db)
    with Session(engine) as s_:
        hm = heatmap(s_, T0 - timedelta(days=1), T0 + timedelta(days=1))
    engine.dispose()
    assert hm["days"] == ["2026-11-28", "2026-11-29", "2026-11-30"]  # T0 ± 1 day, at noon
    assert hm["nodes"] == [{"node": "node-b", "counts": [0, 1, 0], "total": 1}]
