"""A breaker trip against the real kube-apiserver raises one fleet incident (component `fleet`, id
`breaker`), whose ticket and infrastructure message the sinks' own loops send: once, however often
the trip or its request is delivered."""

from __future__ import annotations

import json
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from history.engine import make_engine
from history.migrate import upgrade
from history.tables import Incident
from models.cordon_policy import Breaker, CordonPolicy
from models.fleet import fleet_fingerprint
from respond.cordon.executor import FleetAlert
from respond.fleet_alerts import BreakerTrips
from respond.sinks.build import build_sinks
from respond.sinks.outbox import OutboxChat
from respond.sinks.settings import SinkSettings
from tests.kube import unique
from tests.respond.cordon.conftest import ExecutorFactory, NodeFactory, xid79


def test_a_breaker_trip_is_one_fleet_incident_with_one_ticket_and_message(
    make_node: NodeFactory, make_executor: ExecutorFactory, tmp_path: Path
) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'history.db'}")
    upgrade(engine)
    sinks = build_sinks(SinkSettings(outbox_dir=tmp_path / "out", group_wait_s=0), f"sqlite:///{tmp_path / 'sinks.db'}")
    upgrade(sinks.store.engine)
    pool = unique("pool")
    names = [make_node(pool=pool) for _ in range(10)]
    executor = make_executor(CordonPolicy(breaker=Breaker(max_pool_share=0.2, min_nodes=1, max_per_hour=100)))
    trips = BreakerTrips(engine, sinks, executor.store, "prod-east")
    alerts: list[FleetAlert] = []

    def on_trip(alert: FleetAlert) -> None:
        alerts.append(alert)
        trips(alert)

    executor.on_fleet_alert = on_trip
    requests = [xid79(n) for n in names[:3]]
    results = [executor.handle(r) for r in requests]
    again = executor.handle(requests[2])  # the tripping request, delivered twice

    assert [r.decision for r in results] == ["cordon", "cordon", "trip_breaker"]
    assert again.decision == "breaker_open" and len(alerts) == 1
    assert trips.raise_incident(alerts[0]) is not None  # the callback itself, delivered twice
    with Session(engine) as s:
        (row,) = s.scalars(sa.select(Incident)).all()
        assert (row.component, row.component_id, row.node, row.category, row.status) == (
            "fleet", "breaker", "prod-east", "fleet", "open")
        assert row.fingerprint == fleet_fingerprint("prod-east", "breaker")
        assert row.nodes == sorted(names[:3]) and row.count == 3
        assert pool in row.reason and names[2] in row.reason

    for _ in range(2):  # the responder's loops: the ticket drain and the chat flush
        sinks.tickets.drain()
        sinks.chat.flush()

    tickets = list((tmp_path / "out" / "jira").glob("*/ticket.json"))
    assert len(tickets) == 1
    assert "3 nodes of cluster prod-east" in json.loads(tickets[0].read_text())["summary"]
    (message,) = OutboxChat(tmp_path / "out").messages("#gpu-infra")
    assert "cluster prod-east" in message["text"] and "breaker tripped" in message["text"]
    engine.dispose()
