"""The pages over HTTP: login and the session cookie, CSRF on forms, escaping, security headers,
errors as pages. (tests/web/test_browser.py opens the same pages in Chromium.)"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from aiohttp.test_utils import TestClient

from tests.web.conftest import OPERATOR_TOKEN, READ_TOKEN
from tests.web.seed import HOSTILE_PROCESS, Seeded
from xidpipe.web.session import COOKIE_NAME


async def login(client: TestClient, token: str, nxt: str = "/incidents") -> str:
    resp = await client.post("/login", data={"token": token, "next": nxt}, allow_redirects=False)
    assert resp.status == 303, await resp.text()
    return str(resp.headers["Location"])


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, "no CSRF field on the page"
    return m.group(1)


async def test_pages_need_a_login(client: TestClient) -> None:
    resp = await client.get("/incidents?node=node-a", allow_redirects=False)
    location = urlsplit(resp.headers["Location"])
    assert resp.status == 303 and location.path == "/login"
    assert parse_qs(location.query)["next"] == ["/incidents?node=node-a"]
    assert (await client.get("/login")).status == 200


async def test_a_bad_token_is_refused_and_not_echoed(client: TestClient) -> None:
    resp = await client.post("/login", data={"token": "wrong-token-123456789", "next": "/incidents"},
                             allow_redirects=False)
    html = await resp.text()
    assert resp.status == 401 and "That token is not valid." in html and "wrong-token" not in html
    assert COOKIE_NAME not in resp.headers.get("Set-Cookie", "")


async def test_the_session_cookie_is_httponly_strict_and_holds_no_token(client: TestClient) -> None:
    resp = await client.post("/login", data={"token": OPERATOR_TOKEN, "next": "/heatmap"}, allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/heatmap"
    cookie = resp.headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert "Path=/" in cookie and OPERATOR_TOKEN not in cookie
    page = await client.get("/incidents")
    html = await page.text()
    assert page.status == 200 and "ops (operator)" in html and "node-b" in html
    assert OPERATOR_TOKEN not in html


@pytest.mark.parametrize("nxt", ["//evil.example/", "https://evil.example/", "/\\evil.example", "incidents"])
async def test_login_never_redirects_off_the_site(client: TestClient, nxt: str) -> None:
    assert await login(client, READ_TOKEN, nxt) == "/incidents"


async def test_a_tampered_cookie_is_no_session(client: TestClient) -> None:
    await login(client, READ_TOKEN)
    value = client.session.cookie_jar.filter_cookies(client.make_url("/"))[COOKIE_NAME].value
    payload, mac = value.split(".")
    client.session.cookie_jar.clear()
    good = await client.get("/incidents", allow_redirects=False, headers={"Cookie": f"{COOKIE_NAME}={value}"})
    assert good.status == 200
    for forged in (f"{payload}x.{mac}", f"{payload}.{mac[:-2]}", payload, "e30.abc"):
        resp = await client.get("/incidents", allow_redirects=False, headers={"Cookie": f"{COOKIE_NAME}={forged}"})
        assert resp.status == 303 and resp.headers["Location"].startswith("/login"), forged


async def test_the_transition_form_needs_csrf_and_an_operator(client: TestClient, seeded: Seeded) -> None:
    await login(client, OPERATOR_TOKEN)
    page = await client.get(f"/incidents/{seeded.lost_c}")
    html = await page.text()
    assert 'id="transition-form"' in html
    form = {"to": "rma", "reason": "bad HBM"}
    refused = await client.post(f"/incidents/{seeded.lost_c}/transition", data=form, allow_redirects=False)
    assert refused.status == 403 and "CSRF" in await refused.text()
    done = await client.post(f"/incidents/{seeded.lost_c}/transition", data={**form, "csrf": csrf_of(html)},
                             allow_redirects=False)
    assert done.status == 303 and done.headers["Location"].endswith("?done=rma")
    after = await (await client.get(done.headers["Location"])).text()
    assert "Moved to rma." in after and "bad HBM" in after
    # A read-only session sees no form, and the server refuses the post even with its CSRF token.
    await login(client, READ_TOKEN)
    html = await (await client.get(f"/incidents/{seeded.lost_c}")).text()
    assert 'id="transition-form"' not in html
    refused = await client.post(f"/incidents/{seeded.lost_c}/transition",
                                data={"to": "closed", "reason": "x", "csrf": csrf_of(html)}, allow_redirects=False)
    assert refused.status == 403


async def test_the_api_with_a_session_cookie_needs_the_csrf_header_to_change(client: TestClient,
                                                                              seeded: Seeded) -> None:
    await login(client, OPERATOR_TOKEN)
    assert (await client.get("/api/v1/incidents")).status == 200
    path = f"/api/v1/incidents/{seeded.dbe_b}/transitions"
    refused = await client.post(path, json={"to": "repaired", "reason": "reseated"})
    assert refused.status == 403 and "X-CSRF-Token" in (await refused.json())["detail"]
    token = csrf_of(await (await client.get("/incidents")).text())
    ok = await client.post(path, json={"to": "repaired", "reason": "reseated"}, headers={"X-CSRF-Token": token})
    assert ok.status == 200 and (await ok.json())["actor"] == "ops"


async def test_logout_needs_csrf_and_ends_the_session(client: TestClient) -> None:
    await login(client, READ_TOKEN)
    html = await (await client.get("/incidents")).text()
    assert (await client.post("/logout", data={}, allow_redirects=False)).status == 403
    out = await client.post("/logout", data={"csrf": csrf_of(html)}, allow_redirects=False)
    assert out.status == 303 and out.headers["Location"] == "/login"
    assert (await client.get("/incidents", allow_redirects=False)).status == 303


async def test_markup_from_the_cluster_is_escaped(client: TestClient, seeded: Seeded) -> None:
    await login(client, READ_TOKEN)
    html = await (await client.get(f"/incidents/{seeded.hostile}")).text()
    assert HOSTILE_PROCESS not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    listing = await (await client.get("/incidents", params={"owner": "<b>bold</b>"})).text()
    assert "<b>bold</b>" not in listing and "&lt;b&gt;bold&lt;/b&gt;" in listing


async def test_security_headers_and_local_css(client: TestClient) -> None:
    page = await client.get("/login")
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "style-src 'self'" in csp and "script-src" not in csp
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["X-Content-Type-Options"] == "nosniff"
    html = await page.text()
    assert 'href="/static/style.css"' in html and "http://" not in html and "https://" not in html
    css = await client.get("/static/style.css")
    assert css.status == 200 and css.content_type == "text/css"


async def test_errors_are_pages(client: TestClient) -> None:
    await login(client, READ_TOKEN)
    missing = await client.get("/incidents/v1:nothing")
    assert missing.status == 404 and "no incident" in await missing.text()
    bad = await client.get("/incidents", params={"xid": "abc"})
    assert bad.status == 400 and "xid: expected an integer" in await bad.text()
    # An empty form field means "any": the filter form submits every field.
    empty = await client.get("/incidents", params={"xid": "", "since": "", "sort": "", "lifecycle": ""})
    assert empty.status == 200 and "1–5 of 5" in await empty.text()


async def test_gpu_and_heatmap_pages(client: TestClient, seeded: Seeded) -> None:
    await login(client, READ_TOKEN)
    gpus = await (await client.get("/gpus", params={"node": "node-b"})).text()
    assert "1654923099999" in gpus and "1–5 of 5" in gpus
    gpu = await (await client.get(f"/gpus/{seeded.swapped_serial}")).text()
    assert "<svg" in gpu and 'class="placement"' in gpu and "replaced" in gpu
    heat = await (await client.get("/heatmap", params={"since": "2026-11-26", "until": "2026-11-28"})).text()
    assert 'data-node="node-b" data-day="2026-11-27" data-count="2"' in heat
    assert "3 hardware incidents on 2 nodes" in heat


def _record(url: str, incident_id: str, node: str, **kw: object) -> None:
    """A row of the responder's action record, as its executor writes it."""
    import sqlalchemy as sa

    from history.engine import make_engine
    from history.migrate import upgrade
    from respond.cordon.action_log import ActionRecord, SqlActionStore

    engine = make_engine(url)
    try:
        upgrade(engine)
        SqlActionStore(engine).record(ActionRecord(action="cordon", node=node, incident_id=incident_id, **kw))
        assert sa.inspect(engine).has_table("actions")
    finally:
        engine.dispose()


async def test_the_incident_page_says_what_to_do_and_the_decision_its_record_holds(
        client: TestClient, seeded: Seeded) -> None:
    await login(client, READ_TOKEN)
    html = await (await client.get(f"/incidents/{seeded.dbe_b}")).text()
    todo = html.split('id="what-to-do">')[1].split("</ol>")[0]
    assert todo.count("<li>") >= 5 and "<code>nvidia-smi -r -i GPU-" in todo  # commands shown as code
    assert "No cordon decision yet" in html and "cordon_requested" not in html
    _record(seeded.url, seeded.dbe_b, "node-b", outcome="dry_run", decision="cordon", dry_run=True,
            reason="rule dbe: cordon at once for Xid 48 (memory)")
    html = await (await client.get(f"/incidents/{seeded.dbe_b}")).text()
    decision = html.split('id="decision">')[1].split("</table>")[0]
    assert "Not cordoned (dry run)" in decision and "rule dbe: cordon at once" in decision
    assert "WORKFLOW_XID_48 for Xid 48" in decision
    assert "unknown" not in html.split("<h2>Evidence</h2>")[0].lower()


async def test_a_merged_incident_links_the_one_it_was_merged_into(client: TestClient, seeded: Seeded) -> None:
    import sqlalchemy as sa

    from history.engine import make_engine
    from history.tables import Incident

    engine = make_engine(seeded.url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.update(Incident).where(Incident.incident_id == seeded.hostile)
                         .values(merged_into=seeded.bert))
    finally:
        engine.dispose()
    await login(client, READ_TOKEN)
    html = await (await client.get(f"/incidents/{seeded.hostile}")).text()
    merged = html.split('id="merged-into">')[1].split("</p>")[0]
    assert f'href="/incidents/{seeded.bert}"' in merged and "Merged into" in merged
    assert 'id="what-to-do"' not in html and 'id="decision"' not in html  # said once, in the one it joined


async def test_the_reliability_page_charts_the_figures_the_api_gives(client: TestClient) -> None:
    await login(client, READ_TOKEN)
    rel = (await (await client.get("/api/v1/stats", params={"top": "5"})).json())["reliability"]
    resp = await client.get("/reliability", params={"top": "5"})
    html = await resp.text()
    assert resp.status == 200 and rel["all"]["incidents"] > 0
    assert f"{rel['all']['incidents']} hardware incidents, {rel['all']['resolved']} resolved." in html
    for key in ("by_pool", "by_node", "by_card"):
        assert f'id="reliability-{key}"' in html
    between = {n: f["mean_time_between_incidents_s"] for n, f in rel["by_node"].items()}
    assert any(v is not None for v in between.values())  # the seed has a node with two hardware incidents
    for node, seconds in between.items():
        if seconds is not None:
            assert f'data-label="{node}" data-seconds="{seconds:g}"' in html
    bad = await client.get("/reliability", params={"top": "0"})
    assert bad.status == 400
