"""Fleet incidents end to end in one process: a fault family on 3+ nodes through `Store` is one
incident of component `fleet`, whose ticket and notification actions, handed to the real sinks
(outbox tracker and outbox chat), make one ticket and one message in the infrastructure channel."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.tables import Incident
from models.fleet import fleet_fingerprint
from models.stream_policy import PipelinePolicy
from respond.dossier_builder import build_dossier
from respond.sinks.build import build_sinks
from respond.sinks.model import IncidentNotice
from respond.sinks.outbox import OutboxChat
from respond.sinks.settings import SinkSettings
from streams.items import Item, ItemMapper
from streams.store import BatchResult, Store
from tests import store_reads
from tests.streams.records import T0, Kmsg, inventory, s


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    sqlite = f"sqlite:///{tmp_path / 'f.db'}"
    url = sqlite if request.param == "sqlite" else request.getfixturevalue("postgres_database")
    st = Store(url, PipelinePolicy(fleet_min_nodes=3, fleet_window_s=600), cluster="c1")
    st.create_schema()
    yield st
    st.dispose()


def burst(store: Store, nodes: list[str], at: datetime, xid: int = 79) -> list[BatchResult]:
    out = []
    for n, node in enumerate(nodes):
        mapper = ItemMapper()
        items: list[Item] = []
        for r in (inventory(node, T0), Kmsg(node).xid(0, xid, at + s(n))):
            items.extend(mapper.items(r, "topic"))
        items.extend(mapper.flush_all())
        out.append(store.process(items))
    return out


def fleet_messages(results: list[BatchResult]) -> list[dict[str, Any]]:
    return [o.payload for r in results for o in r.outgoing if o.key == "c1"]


def test_a_family_on_three_nodes_is_one_fleet_incident(store: Store) -> None:
    results = burst(store, ["rack-0", "rack-1"], T0 + s(10))
    assert store_reads.fleet_incidents(store) == [] and fleet_messages(results) == []  # two nodes: no fleet incident

    results = burst(store, ["rack-2", "rack-3"], T0 + s(20))

    (fleet,) = store_reads.fleet_incidents(store)
    assert (fleet["component"], fleet["component_id"], fleet["node"], fleet["gpu"]) == ("fleet", "gpu_lost", "c1",
                                                                                        "fleet")
    assert fleet["category"] == "fleet" and fleet["status"] == "open" and fleet["family"] == "gpu_lost"
    assert fleet["nodes"] == ["rack-0", "rack-1", "rack-2", "rack-3"] and fleet["count"] == 4
    assert fleet["codes"] == ["Xid 79"] and "rack-0, rack-1, rack-2" in fleet["reason"]
    assert fleet["fingerprint"] == fleet_fingerprint("c1", "gpu_lost") and fleet["fingerprint"].startswith("v2:")
    messages = fleet_messages(results)
    assert [(m.get("change"), m.get("kind"), m.get("operation")) for m in messages] == [
        ("opened", None, None), (None, "ticket", "create"), (None, "notification", "opened"), ("updated", None, None)]
    assert all(m.get("kind") != "cordon_candidate" for m in messages)
    # The nodes' own incidents stay what they were: one GPU incident each.
    own = sorted(i["node"] for i in store_reads.incidents(store) if i["component"] != "fleet")
    assert own == [f"rack-{n}" for n in range(4)]


def test_a_new_burst_after_the_window_resolves_and_reopens(store: Store) -> None:
    burst(store, ["a", "b", "c"], T0)
    results = burst(store, ["d", "e", "f"], T0 + timedelta(hours=2))

    first, second = store_reads.fleet_incidents(store)
    assert first["status"] == "resolved" and second["status"] == "open"
    assert second["previous_incident_id"] == first["incident_id"] and second["nodes"] == ["d", "e", "f"]
    kinds = [(m.get("change"), m.get("operation")) for m in fleet_messages(results) if m.get("kind") != "ticket"]
    assert ("resolved", None) in kinds and (None, "reopened") in kinds


def test_the_sweep_resolves_a_quiet_fleet_incident(store: Store) -> None:
    burst(store, ["a", "b", "c"], T0)
    now = datetime.now(UTC)
    assert [o for o in store.sweep(now + timedelta(seconds=60)) if o.key == "c1"] == []
    out = [o.payload for o in store.sweep(now + timedelta(seconds=601)) if o.key == "c1"]
    assert [(m.get("change"), m.get("kind"), m.get("operation")) for m in out] == [
        ("resolved", None, None), (None, "notification", "resolved")]
    (fleet,) = store_reads.fleet_incidents(store)
    assert fleet["status"] == "resolved"


def test_fleet_incident_gets_one_ticket_and_one_infra_message(store: Store, tmp_path: Path) -> None:
    results = burst(store, ["rack-0", "rack-1", "rack-2"], T0)
    burst(store, ["rack-3"], T0 + s(30))  # a fourth node joins: no second ticket or message
    actions = [m for m in fleet_messages(results) if m.get("kind")]
    sinks = build_sinks(SinkSettings(outbox_dir=tmp_path / "out", group_wait_s=0), f"sqlite:///{tmp_path / 'sinks.db'}")
    from history.migrate import upgrade

    upgrade(sinks.store.engine)
    for _ in range(2):  # at-least-once: every action delivered twice
        for a in actions:
            with Session(store.engine) as s_:
                row = s_.get(Incident, a["incident_id"])
                assert row is not None
                notice = IncidentNotice(dossier=build_dossier(s_, row, cluster="c1"),
                                        labels={"node": row.node, "family": row.family, "category": row.category})
            if a["kind"] == "ticket":
                sinks.tickets.submit(notice)
            else:
                sinks.chat.submit(notice)

    tickets = list((tmp_path / "out" / "jira").glob("*/ticket.json"))
    assert len(tickets) == 1
    ticket = json.loads(tickets[0].read_text())
    assert "gpu-fleet" in json.dumps(ticket) and "4 nodes of cluster c1" in ticket["summary"]
    chat = OutboxChat(tmp_path / "out")
    (message,) = chat.messages("#gpu-infra")
    assert "cluster c1" in message["text"] and "rack-3" in message["text"]
    assert chat.messages("#gpu-alerts") == []
    with Session(store.engine) as s_:
        fleet = s_.scalars(sa.select(Incident).where(Incident.component == "fleet")).one()
        dossier = build_dossier(s_, fleet)
    assert dossier.gpu.uuid is None and dossier.nodes == ["rack-0", "rack-1", "rack-2", "rack-3"]
    assert sorted(h.node for h in dossier.node_incidents) == ["rack-0", "rack-1", "rack-2", "rack-3"]
