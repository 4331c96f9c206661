"""Fleet incidents on the read side: the API's and the pages' component filter, the incident page
of a fleet incident (its nodes and their incidents, no GPU), and `xidpipe incidents list|show`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from models.stream_policy import PipelinePolicy
from streams.items import ItemMapper
from streams.store import Store
from tests import store_reads
from tests.streams.records import Kmsg, inventory, s
from tests.web.conftest import READ, READ_TOKEN
from tests.web.seed import DAY0, Seeded
from xidpipe.cli import main
from xidpipe.web.app import make_app
from xidpipe.web.db import Database
from xidpipe.web.tokens import load_tokens

BURST_AT = DAY0 + timedelta(days=2, hours=3)
RACK = ["rack-1", "rack-2", "rack-3"]


@dataclass(frozen=True)
class WithFleet:
    url: str
    fleet_id: str


@pytest.fixture
def history(seeded: Seeded) -> WithFleet:
    """The seeded history, and Xid 79 on three more nodes within a minute: a fleet incident."""
    store = Store(seeded.url, PipelinePolicy(fleet_min_nodes=3), cluster="prod-east")
    mapper = ItemMapper()
    records = [r for n, node in enumerate(RACK)
               for r in (inventory(node, DAY0), Kmsg(node).xid(0, 79, BURST_AT + s(n)))]
    store.process([it for r in records for it in mapper.items(r, "topic")] + mapper.flush_all())
    (fleet,) = store_reads.fleet_incidents(store)
    store.dispose()
    return WithFleet(seeded.url, fleet["incident_id"])


@pytest.fixture
async def fleet_client(history: WithFleet, tokens_file: Path) -> AsyncIterator[TestClient]:
    db = Database(history.url)
    app = make_app(db, load_tokens(tokens_file), session_secret=b"s" * 32)
    async with TestClient(TestServer(app)) as c:
        yield c
    db.close()


async def test_api_filters_and_shows_fleet_incidents(fleet_client: TestClient, history: WithFleet) -> None:
    resp = await fleet_client.get("/api/v1/incidents?component=fleet", headers=READ)
    page = await resp.json()
    assert resp.status == 200 and page["total"] == 1
    (inc,) = page["incidents"]
    assert (inc["incident_id"], inc["component"], inc["component_id"], inc["node"]) == (
        history.fleet_id, "fleet", "gpu_lost", "prod-east")
    assert inc["nodes"] == RACK and inc["count"] == 3 and inc["category"] == "fleet"
    gpus = await (await fleet_client.get("/api/v1/incidents?component=gpu&limit=500", headers=READ)).json()
    assert gpus["total"] >= 5 and {i["component"] for i in gpus["incidents"]} == {"gpu"}
    assert history.fleet_id not in {i["incident_id"] for i in gpus["incidents"]}
    bad = await fleet_client.get("/api/v1/incidents?component=rack", headers=READ)
    assert bad.status == 400 and "component" in (await bad.json())["detail"]

    detail = await (await fleet_client.get(f"/api/v1/incidents/{history.fleet_id}", headers=READ)).json()
    d = detail["dossier"]
    assert d["component"] == "fleet" and d["nodes"] == RACK and d["gpu"]["uuid"] is None
    assert sorted(h["node"] for h in d["node_incidents"]) == RACK
    assert d["title"].startswith("[xidpipe] fleet: gpu_lost (Xid 79) on 3 nodes of cluster prod-east")


async def test_pages_filter_and_show_a_fleet_incident(fleet_client: TestClient, history: WithFleet) -> None:
    resp = await fleet_client.post("/login", data={"token": READ_TOKEN, "next": "/incidents"}, allow_redirects=False)
    assert resp.status == 303
    listing = await (await fleet_client.get("/incidents?component=fleet")).text()
    assert history.fleet_id in listing and "fleet · 3 nodes" in listing
    assert '<option selected>fleet</option>' in listing
    assert "node-a" not in listing  # the GPU incidents are filtered out
    html = await (await fleet_client.get(f"/incidents/{history.fleet_id}")).text()
    assert 'id="fleet-nodes"' in html and all(f">{n}</a>" in html for n in RACK)
    assert "Incidents of its nodes" in html
    assert "<th>GPU</th>" not in html and "Attribution at the time of the fault" not in html


def test_cli_lists_and_shows_fleet_incidents(history: WithFleet, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["incidents", "list", "--component", "fleet", "--database-url", history.url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["total"] == 1 and listed["incidents"][0]["nodes"] == RACK
    assert main(["incidents", "list", "--component", "fleet", "--database-url", history.url]) == 0
    table = capsys.readouterr().out
    assert "fleet: 3 nodes" in table and "prod-east" in table and "node-a" not in table
    assert main(["incidents", "show", history.fleet_id, "--database-url", history.url]) == 0
    shown = capsys.readouterr().out
    # Piped: the dossier's Markdown; the summary's rows, no GPU row.
    rows = set(shown.splitlines())
    assert "| **Cluster** | prod-east |" in rows and "| **Nodes** | 3: rack-1, rack-2, rack-3 |" in rows, shown
    assert "### Incidents of its nodes" in rows and not any(r.startswith("| **GPU** |") for r in rows)
