"""The API on PostgreSQL, the production database: the same history, the same answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.web.conftest import OPERATOR, READ
from tests.web.seed import Seeded, seed
from xidpipe.web.app import make_app
from xidpipe.web.db import Database
from xidpipe.web.tokens import load_tokens


@pytest.fixture
async def pg(postgres_database: str, tokens_file: Path) -> AsyncIterator[tuple[TestClient, Seeded]]:
    seeded = seed(postgres_database)
    db = Database(postgres_database)
    async with TestClient(TestServer(make_app(db, load_tokens(tokens_file)))) as client:
        yield client, seeded
    db.close()


async def test_the_api_answers_the_same_on_postgresql(pg: tuple[TestClient, Seeded]) -> None:
    client, seeded = pg
    page = await (await client.get("/api/v1/incidents", params={"category": "hardware"}, headers=READ)).json()
    assert page["total"] == 3
    assert [i["incident_id"] for i in (await (await client.get(
        "/api/v1/incidents", params={"xid": "13", "namespace": "team-nlp"}, headers=READ)).json())["incidents"]] == [
        seeded.bert]
    detail = await (await client.get(f"/api/v1/incidents/{seeded.bert}", headers=READ)).json()
    assert detail["dossier"]["attribution"]["pod"] == "bert-1" and len(detail["timeline"]) == 2
    heat = await (await client.get("/api/v1/heatmap", params={"since": "2026-11-26", "until": "2026-11-28"},
                                   headers=READ)).json()
    assert heat["nodes"] == [{"node": "node-b", "counts": [0, 2, 0], "total": 2},
                             {"node": "node-c", "counts": [0, 0, 1], "total": 1}]
    history = await (await client.get(f"/api/v1/gpus/{seeded.swapped_serial}", headers=READ)).json()
    assert "replaced" in [e["kind"] for e in history["events"]]
    stats = await (await client.get("/api/v1/stats", headers=READ)).json()
    assert stats["incidents"]["by_category"] == {"hardware": 3, "application": 2}
    done = await client.post(f"/api/v1/incidents/{seeded.lost_c}/transitions",
                             json={"to": "closed", "reason": "card replaced"}, headers=OPERATOR)
    assert done.status == 200 and (await done.json())["actor"] == "ops"
    # Text PostgreSQL cannot store is a 400, not a driver error.
    bad = await client.get("/api/v1/incidents", params={"owner": "a\x00b"}, headers=READ)
    assert bad.status == 400
