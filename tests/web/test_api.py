"""The JSON API against a history the real pipeline wrote: filters, pagination, one incident, the
lifecycle transition, GPUs, stats, heatmap, and the errors (401, 403, 400, 404, 405, 409)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from aiohttp.test_utils import TestClient

from history.tables import Incident, IncidentTransition
from tests.web.conftest import OPERATOR, OPERATOR_TOKEN, READ, READ_TOKEN, auth
from tests.web.seed import Seeded

API = "/api/v1"


async def get(client: TestClient, path: str, expect: int = 200, **params: Any) -> Any:
    resp = await client.get(path, params=params, headers=READ)
    body = await resp.json(content_type=None)
    assert resp.status == expect, body
    return body


async def listed(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    return list((await get(client, f"{API}/incidents", **params))["incidents"])


async def test_health_needs_no_token(client: TestClient) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200 and await resp.json() == {"status": "ok"}


@pytest.mark.parametrize("headers", [{}, auth("not-a-token-at-all-xxxx"), {"Authorization": "Basic abc"},
                                     {"Authorization": "Bearer "}])
async def test_no_or_a_bad_token_is_401_without_echoing_it(client: TestClient, headers: dict[str, str]) -> None:
    resp = await client.get(f"{API}/incidents", headers=headers)
    assert resp.status == 401
    assert resp.content_type == "application/problem+json"
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    text = await resp.text()
    assert "not-a-token" not in text and (await resp.json())["status"] == 401


async def test_list_filters(client: TestClient, seeded: Seeded) -> None:
    everything = await get(client, f"{API}/incidents")
    assert everything["total"] == 5 and len(everything["incidents"]) == 5
    assert {i["node"] for i in await listed(client, node="node-b")} == {"node-b"}
    assert [i["incident_id"] for i in await listed(client, xid=13)] == [seeded.bert]
    assert [i["incident_id"] for i in await listed(client, gpu=seeded.bert_serial)] == [seeded.bert]
    assert {i["incident_id"] for i in await listed(client, category="hardware")} == {
        seeded.lost_b, seeded.dbe_b, seeded.lost_c}
    assert [i["incident_id"] for i in await listed(client, namespace="team-nlp")] == [seeded.bert]
    assert [i["incident_id"] for i in await listed(client, owner="bert")] == [seeded.bert]
    assert {i["incident_id"] for i in await listed(client, since="2026-11-27T00:00:00Z")} == {
        seeded.lost_b, seeded.dbe_b, seeded.lost_c}
    assert {i["incident_id"] for i in await listed(client, until="2026-11-27")} == {seeded.bert, seeded.hostile}
    assert len(await listed(client, status="open")) == 5
    assert len(await listed(client, lifecycle="open")) == 5
    assert await listed(client, lifecycle="closed") == []


async def test_sort_and_pages(client: TestClient, seeded: Seeded) -> None:
    first = await get(client, f"{API}/incidents", sort="first_seen", limit=2)
    rest = await get(client, f"{API}/incidents", sort="first_seen", limit=2, offset=2)
    assert first["total"] == rest["total"] == 5 and first["limit"] == 2 and rest["offset"] == 2
    ids = [i["incident_id"] for i in first["incidents"] + rest["incidents"]]
    assert ids == [seeded.lost_c, seeded.dbe_b, seeded.lost_b, seeded.hostile]
    beyond = await get(client, f"{API}/incidents", offset=100)
    assert beyond["total"] == 5 and beyond["incidents"] == []


@pytest.mark.parametrize(("params", "says"), [
    ({"xid": "x13"}, "xid: expected an integer"),
    ({"limit": "0"}, "limit"), ({"limit": "501"}, "at most 500"), ({"offset": "-1"}, "offset"),
    ({"since": "yesterday"}, "RFC 3339"), ({"until": "2026-02-30"}, "until"),
    ({"sort": "name"}, "one of last_seen, first_seen, count"), ({"lifecycle": "broken"}, "lifecycle"),
    ({"status": ""}, "status"), ({"node": "a\x00b"}, "NUL"), ({"node": "n" * 300}, "at most 253"),
    ({"xid": "99999999999999999999999"}, "xid"),
])
async def test_bad_parameters_are_400_problems(client: TestClient, params: dict[str, str], says: str) -> None:
    resp = await client.get(f"{API}/incidents", params=params, headers=READ)
    assert resp.status == 400
    assert resp.content_type == "application/problem+json"
    body = await resp.json()
    assert body["title"] == "Bad query parameter" and says in body["detail"], body


async def test_a_repeated_parameter_is_400(client: TestClient) -> None:
    resp = await client.get(f"{API}/incidents?node=a&node=b", headers=READ)
    assert resp.status == 400 and "given 2 times" in (await resp.json())["detail"]


async def test_times_far_out_of_range_are_clamped_not_500(client: TestClient) -> None:
    assert await listed(client, since="9999-12-31T23:59:59-23:59") == []
    assert len(await listed(client, since="0001-01-01T00:00:00+23:59")) == 5


async def test_one_incident(client: TestClient, seeded: Seeded) -> None:
    body = await get(client, f"{API}/incidents/{seeded.bert}")
    assert body["incident"]["incident_id"] == seeded.bert and body["incident"]["lifecycle"] == "open"
    d = body["dossier"]
    assert d["incident_id"] == seeded.bert and d["dossier_version"] == 2
    assert d["attribution"]["pod"] == "bert-1" and d["attribution"]["namespace"] == "team-nlp"
    assert [c["code"] for c in d["codes"]] == ["Xid 13", "Xid 43"]
    assert [e["code"] for e in body["timeline"]] == ["Xid 13", "Xid 43"]
    assert body["timeline"][0]["pid"] == 11 and body["transitions"] == []
    by_prefix = await get(client, f"{API}/incidents/{seeded.bert[:14]}")
    assert by_prefix["incident"]["incident_id"] == seeded.bert


async def test_cordon_requested_and_the_decision_come_from_the_action_record(client: TestClient,
                                                                              seeded: Seeded) -> None:
    """`cordon_requested` is true exactly when the cordon policy asked for a cordon (the stored column
    never said so); `decision` is what came of it, in the list as in the incident."""
    from tests.web.test_pages import _record

    def listed_dbe(body: dict[str, Any]) -> dict[str, Any]:
        return next(i for i in body["incidents"] if i["incident_id"] == seeded.dbe_b)

    before = await get(client, f"{API}/incidents/{seeded.dbe_b}")
    assert (before["incident"]["cordon_requested"], before["incident"]["decision"]) == (False, "pending")
    _record(seeded.url, seeded.lost_c, "node-c", outcome="skipped", decision="not_needed", reason="no rule")
    _record(seeded.url, seeded.dbe_b, "node-b", outcome="done", decision="cordon", reason="rule dbe")
    after = await get(client, f"{API}/incidents/{seeded.dbe_b}")
    assert (after["incident"]["cordon_requested"], after["incident"]["decision"]) == (True, "cordoned")
    assert after["dossier"]["account"]["decision_text"].startswith("Cordoned: xidpipe cordoned node-b")
    assert after["dossier"]["what_to_do"][0].startswith("xidpipe ")
    lost = await get(client, f"{API}/incidents/{seeded.lost_c}")
    assert (lost["incident"]["cordon_requested"], lost["incident"]["decision"]) == (False, "not_needed")
    page = await get(client, f"{API}/incidents?node=node-b")
    assert (listed_dbe(page)["cordon_requested"], listed_dbe(page)["decision"]) == (True, "cordoned")
    bert = await get(client, f"{API}/incidents/{seeded.bert}")
    assert bert["incident"]["decision"] in ("not_offered", "pending") and not bert["incident"]["cordon_requested"]


async def test_an_unknown_incident_is_404(client: TestClient) -> None:
    body = await get(client, f"{API}/incidents/v1:nothing-here", expect=404)
    assert body["status"] == 404 and "no incident" in body["detail"]


async def test_transition_needs_an_operator(client: TestClient, seeded: Seeded) -> None:
    path = f"{API}/incidents/{seeded.lost_b}/transitions"
    resp = await client.post(path, json={"to": "rma", "reason": "card is dead"}, headers=READ)
    assert resp.status == 403 and "operator" in (await resp.json())["detail"]
    resp = await client.post(path, json={"to": "rma", "reason": "card is dead"})
    assert resp.status == 401


async def test_transition_is_recorded_with_the_tokens_name(client: TestClient, seeded: Seeded) -> None:
    path = f"{API}/incidents/{seeded.lost_b}/transitions"
    resp = await client.post(path, json={"to": "rma", "reason": "  card is dead  "}, headers=OPERATOR)
    body = await resp.json()
    assert resp.status == 200, body
    assert body["from"] == "open" and body["to"] == "rma" and body["actor"] == "ops"
    assert body["reason"] == "card is dead" and body["incident_id"] == seeded.lost_b
    detail = await get(client, f"{API}/incidents/{seeded.lost_b}")
    assert detail["incident"]["lifecycle"] == "rma" and detail["incident"]["status"] == "resolved"
    assert [(t["from"], t["to"], t["actor"]) for t in detail["transitions"]] == [("open", "rma", "ops")]
    assert [i["incident_id"] for i in await listed(client, lifecycle="rma")] == [seeded.lost_b]
    # Committed: another connection sees it.
    engine = sa.create_engine(seeded.url)
    with engine.connect() as conn:
        assert conn.scalar(sa.select(Incident.lifecycle).where(Incident.incident_id == seeded.lost_b)) == "rma"
        assert conn.scalar(sa.select(sa.func.count()).select_from(IncidentTransition)) == 1
    engine.dispose()
    # Backwards, or the same step again: 409 with the rule's reason.
    again = await client.post(path, json={"to": "repaired", "reason": "oops"}, headers=OPERATOR)
    assert again.status == 409 and "not allowed" in (await again.json())["detail"]


@pytest.mark.parametrize(("body", "says"), [
    (b"not json", "JSON object"), (b"[1]", "JSON object"), (b'{"to": "rma"}', "reason"),
    (b'{"to": "mitigated", "reason": "x"}', "responder"), (b'{"to": "rma", "reason": "   "}', "reason"),
    (b'{"to": "rma", "reason": "x", "actor": "root"}', "unknown field(s): actor"),
])
async def test_bad_transition_bodies_are_400(client: TestClient, seeded: Seeded, body: bytes, says: str) -> None:
    resp = await client.post(f"{API}/incidents/{seeded.lost_b}/transitions", data=body,
                             headers={**OPERATOR, "Content-Type": "application/json"})
    problem = await resp.json()
    assert resp.status == 400 and says in problem["detail"], problem


async def test_transition_of_an_unknown_incident_is_404(client: TestClient) -> None:
    resp = await client.post(f"{API}/incidents/v1:nothing/transitions", json={"to": "closed", "reason": "x"},
                             headers=OPERATOR)
    assert resp.status == 404


async def test_wrong_method_and_unknown_path(client: TestClient) -> None:
    resp = await client.delete(f"{API}/incidents", headers=READ)
    assert resp.status == 405 and resp.headers["Allow"] == "GET"
    assert resp.content_type == "application/problem+json"
    resp = await client.get(f"{API}/nothing", headers=READ)
    assert resp.status == 404 and resp.content_type == "application/problem+json"


async def test_gpus_and_a_swapped_cards_history(client: TestClient, seeded: Seeded) -> None:
    page = await get(client, f"{API}/gpus", node="node-b", state="in_service")
    cards = {g["serial"]: g for g in page["gpus"]}
    assert page["total"] == 4 and "1654923099999" in cards and seeded.swapped_serial not in cards
    everything = {g["serial"]: g for g in (await get(client, f"{API}/gpus", node="node-b"))["gpus"]}
    assert everything[seeded.swapped_serial]["state"] != "in_service"
    assert everything[seeded.swapped_serial]["hardware_incidents"] == 1
    assert cards["1654923099999"]["pci_slot"] == "0000:58:00.0" and cards["1654923099999"]["incidents"] == 0
    one = await get(client, f"{API}/gpus", node="node-b", limit=1, offset=3)
    assert one["total"] == 5 and len(one["gpus"]) == 1
    history = await get(client, f"{API}/gpus/{seeded.swapped_serial}")
    assert history["serial"] == seeded.swapped_serial
    assert [(p["node"], p["pci_slot"]) for p in history["placements"]] == [("node-b", "0000:58:00.0")]
    assert history["placements"][0]["valid_to"] is not None
    assert "replaced" in [e["kind"] for e in history["events"]]
    assert [i["incident_id"] for i in history["incidents"]] == [seeded.lost_b]
    assert history["incidents"][0]["category"] == "hardware"
    await get(client, f"{API}/gpus/no-such-card", expect=404)
    await get(client, f"{API}/gpus", expect=400, state="broken")


async def test_stats(client: TestClient) -> None:
    body = await get(client, f"{API}/stats")
    assert body["incidents"]["total"] == 5 and body["fault_events"]["total"] == 6
    assert body["incidents"]["by_category"] == {"hardware": 3, "application": 2}
    assert body["incidents"]["hardware_by_node"] == {"node-b": 2, "node-c": 1}
    assert (await get(client, f"{API}/stats", since="2026-11-28"))["incidents"]["total"] == 1
    await get(client, f"{API}/stats", expect=400, top="0")


async def test_heatmap(client: TestClient) -> None:
    body = await get(client, f"{API}/heatmap", since="2026-11-25", until="2026-11-29")
    assert body["days"] == ["2026-11-25", "2026-11-26", "2026-11-27", "2026-11-28", "2026-11-29"]
    assert body["nodes"] == [{"node": "node-b", "counts": [0, 0, 2, 0, 0], "total": 2},
                             {"node": "node-c", "counts": [0, 0, 0, 1, 0], "total": 1}]
    assert (await get(client, f"{API}/heatmap", since="2026-11-29", until="2026-11-25"))["days"] == []
    wide = await get(client, f"{API}/heatmap", since="2000-01-01", until="2026-11-29")
    assert len(wide["days"]) == 366
    await get(client, f"{API}/heatmap", expect=400, since="2026-13-01")


async def test_openapi_is_public_and_names_every_route(client: TestClient) -> None:
    resp = await client.get(f"{API}/openapi.json")
    spec = await resp.json()
    assert resp.status == 200 and spec["openapi"] == "3.1.0"
    assert set(spec["paths"]) == {"/healthz", f"{API}/openapi.json", f"{API}/incidents", f"{API}/incidents/{{id}}",
                                  f"{API}/incidents/{{id}}/transitions", f"{API}/gpus", f"{API}/gpus/{{ident}}",
                                  f"{API}/stats", f"{API}/heatmap"}
    post = spec["paths"][f"{API}/incidents/{{id}}/transitions"]["post"]
    assert set(post["responses"]) == {"200", "400", "401", "403", "404", "409", "429"}
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    params = {p["name"] for p in spec["paths"][f"{API}/incidents"]["get"]["parameters"]}
    assert params == {"node", "gpu", "xid", "category", "status", "lifecycle", "component", "since", "until",
                      "namespace", "owner", "sort", "limit", "offset"}


async def test_tokens_never_appear_in_answers(client: TestClient, seeded: Seeded) -> None:
    for path in (f"{API}/incidents", f"{API}/incidents/{seeded.bert}", f"{API}/openapi.json", f"{API}/stats"):
        text = await (await client.get(path, headers=OPERATOR)).text()
        assert READ_TOKEN not in text and OPERATOR_TOKEN not in text
