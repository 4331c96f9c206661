"""The server against input an attacker chooses: where a login may send the browser, revoked
sessions, throttled guessing, LIKE wildcards, deep JSON, forged log lines, the transition banner,
and `Secure` cookies behind a TLS-terminating proxy."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.web.conftest import OPERATOR, OPERATOR_TOKEN, READ, READ_TOKEN
from tests.web.seed import Seeded
from tests.web.test_pages import csrf_of, login
from xidpipe.web.app import make_app
from xidpipe.web.db import Database
from xidpipe.web.guard import Proxies, Throttle, json_depth_ok, log_text, safe_next
from xidpipe.web.session import COOKIE_NAME
from xidpipe.web.tokens import load_tokens

API = "/api/v1"


@pytest.mark.parametrize("nxt", ["/\t/evil.example/x", "/\n/evil.example/x", "/\r\n/evil.example", "/ /evil.example",
                                 "/x\x01y", "/x\x7fy", "/\u3000/evil.example", "/\\evil.example", "//evil.example"])
async def test_login_never_redirects_off_the_site_whatever_the_browser_drops(client: TestClient, nxt: str) -> None:
    assert await login(client, READ_TOKEN, nxt) == "/incidents"


async def test_the_login_form_carries_no_hostile_next(client: TestClient) -> None:
    html = await (await client.get("/login", params={"next": "/\t/evil.example/x"})).text()
    assert 'name="next" value="/incidents"' in html and "evil.example" not in html
    html = await (await client.get("/login", params={"next": "/gpus?model=H100"})).text()
    assert "evil" not in html and "/gpus?model=H100" in html


def test_safe_next_keeps_local_paths_only() -> None:
    assert safe_next("/incidents/inc-1?done=closed") == "/incidents/inc-1?done=closed"
    assert safe_next("/gpus?model=H100%2080GB") == "/gpus?model=H100%2080GB"
    for bad in ("", None, "incidents", "https://evil.example", "/\t/evil", "/\\evil", "/" + "a" * 3000):
        assert safe_next(bad) == "/incidents"


async def test_logout_revokes_the_session_on_the_server(client: TestClient) -> None:
    await login(client, READ_TOKEN)
    cookie = client.session.cookie_jar.filter_cookies(client.make_url("/"))[COOKIE_NAME].value
    html = await (await client.get("/incidents")).text()
    out = await client.post("/logout", data={"csrf": csrf_of(html)}, allow_redirects=False)
    assert out.status == 303
    client.session.cookie_jar.clear()
    replay = await client.get("/incidents", headers={"Cookie": f"{COOKIE_NAME}={cookie}"}, allow_redirects=False)
    assert replay.status == 303 and replay.headers["Location"].startswith("/login")
    api = await client.get(f"{API}/incidents", headers={"Cookie": f"{COOKIE_NAME}={cookie}"})
    assert api.status == 401


async def test_wrong_logins_are_throttled_per_client_and_the_right_token_still_passes(client: TestClient) -> None:
    for i in range(10):
        resp = await client.post("/login", data={"token": f"wrong-token-{i:04d}-abcdefghij"}, allow_redirects=False)
        assert resp.status == 401
    refused = await client.post("/login", data={"token": "wrong-token-0010"}, allow_redirects=False)
    assert refused.status == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
    # X-Forwarded-For from a client that is not a trusted proxy changes nothing
    spoofed = await client.post("/login", data={"token": "wrong-token-0011"}, headers={"X-Forwarded-For": "10.9.9.9"},
                                allow_redirects=False)
    assert spoofed.status == 429
    # Everyone behind one address (an ingress, a NAT) shares its failures, not its lockout: the right token
    # is judged on its own (tokens carry 128 bits, so guessing is not what the throttle stops).
    right = await client.post("/login", data={"token": READ_TOKEN}, allow_redirects=False)
    assert right.status == 303


async def test_wrong_bearer_tokens_are_throttled_and_a_right_one_is_served(client: TestClient) -> None:
    for i in range(10):
        assert (await client.get(f"{API}/incidents", headers={"Authorization": f"Bearer guess-{i}"})).status == 401
    resp = await client.get(f"{API}/incidents", headers={"Authorization": "Bearer guess-10"})
    assert resp.status == 429 and resp.headers["Retry-After"]
    assert (await resp.json())["status"] == 429
    assert (await client.get(f"{API}/incidents", headers=READ)).status == 200


def test_the_throttle_forgets_failures_after_the_window_and_bounds_its_memory() -> None:
    t = Throttle(failures=3, window_s=60, max_clients=2)
    for at in (0, 1, 2):
        t.failed("a", now=at)
    assert t.retry_after("a", now=3) == 57 and t.retry_after("a", now=60.5) == 0
    t.failed("b", now=4)
    t.failed("c", now=5)
    assert t.retry_after("a", now=6) == 0  # forgotten: the two clients seen last are kept


async def test_like_wildcards_name_no_incident(client: TestClient, seeded: Seeded) -> None:
    tail = seeded.lost_c.split("@")[0][-10:]  # a part of the fingerprint no other incident has
    assert (await client.get(f"{API}/incidents/{seeded.lost_c}", headers=READ)).status == 200
    for ident in (f"%{tail}", f"%25{tail}", "inc_%", "%"):
        assert (await client.get(f"{API}/incidents/{ident}", headers=READ)).status == 404, ident
    moved = await client.post(f"{API}/incidents/%25{tail}/transitions", headers=OPERATOR,
                              json={"to": "closed", "reason": "wildcard"})
    assert moved.status == 404


async def test_like_wildcards_in_the_gpu_model_filter_match_themselves(client: TestClient) -> None:
    everything = await (await client.get(f"{API}/gpus", headers=READ)).json()
    assert everything["total"] > 0
    for model in ("%", "_", "\\", "H100%HBM3"):
        page = await (await client.get(f"{API}/gpus", params={"model": model}, headers=READ)).json()
        assert page["total"] == 0, model
    h100 = await (await client.get(f"{API}/gpus", params={"model": "h100"}, headers=READ)).json()
    assert h100["total"] > 0  # the filter still matches a part of the model, in any case


async def test_a_deeply_nested_body_is_a_400_not_a_500(client: TestClient, seeded: Seeded) -> None:
    body = '{"to": ' + "[" * 5_000 + "]" * 5_000 + ', "reason": "x"}'
    resp = await client.post(f"{API}/incidents/{seeded.lost_c}/transitions", data=body,
                             headers={**OPERATOR, "Content-Type": "application/json"})
    assert resp.status == 400 and "nests deeper" in (await resp.json())["detail"]
    assert json_depth_ok(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')
    assert not json_depth_ok(b"[" * 33 + b"]" * 33)


async def test_a_reason_with_line_breaks_forges_no_log_line(client: TestClient, seeded: Seeded,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    forged = "disk swapped\r\n2026-12-01 INFO xidpipe.web.api: incident inc-x closed by admin"
    with caplog.at_level(logging.INFO, logger="xidpipe.web"):
        resp = await client.post(f"{API}/incidents/{seeded.lost_c}/transitions", headers=OPERATOR,
                                 json={"to": "repaired", "reason": forged})
    assert resp.status == 200
    lines = [r.getMessage() for r in caplog.records if "lifecycle" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and "\r" not in lines[0]
    assert "disk swapped\\r\\n2026-12-01" in lines[0]
    assert log_text("a\u2028b\\c\x1b[31m") == "a\\u2028b\\\\c\\x1b[31m"


async def test_the_transition_banner_shows_no_text_from_the_query(client: TestClient, seeded: Seeded) -> None:
    await login(client, OPERATOR_TOKEN)
    hostile = await (await client.get(f"/incidents/{seeded.lost_c}",
                                      params={"done": "closed. Call support at +1-555-0100"})).text()
    assert "555-0100" not in hostile and 'id="transition-done"' not in hostile
    honest = await (await client.get(f"/incidents/{seeded.lost_c}", params={"done": "repaired"})).text()
    assert 'id="transition-done"' in honest


@pytest.fixture
async def proxied(seeded: Seeded, tokens_file: Path) -> AsyncIterator[TestClient]:
    db = Database(seeded.url)
    app = make_app(db, load_tokens(tokens_file), session_secret=b"s" * 32, proxies=Proxies(["127.0.0.0/8"]))
    async with TestClient(TestServer(app)) as c:
        yield c
    db.close()


async def test_cookies_are_secure_behind_a_trusted_tls_proxy(client: TestClient, proxied: TestClient) -> None:
    https = {"X-Forwarded-Proto": "https"}
    behind = await proxied.post("/login", data={"token": READ_TOKEN}, headers=https, allow_redirects=False)
    assert behind.status == 303 and "Secure" in behind.headers["Set-Cookie"]
    plain = await proxied.post("/login", data={"token": READ_TOKEN}, allow_redirects=False)
    assert "Secure" not in plain.headers["Set-Cookie"]
    untrusted = await client.post("/login", data={"token": READ_TOKEN}, headers=https, allow_redirects=False)
    assert "Secure" not in untrusted.headers["Set-Cookie"]  # only a trusted proxy is believed


async def test_behind_a_trusted_proxy_the_forwarded_client_is_throttled(proxied: TestClient) -> None:
    for i in range(10):
        await proxied.post("/login", data={"token": f"wrong-{i}"}, headers={"X-Forwarded-For": "203.0.113.7"},
                           allow_redirects=False)
    blocked = await proxied.post("/login", data={"token": "wrong-10"}, headers={"X-Forwarded-For": "203.0.113.7"},
                                 allow_redirects=False)
    other = await proxied.post("/login", data={"token": "wrong-10"}, headers={"X-Forwarded-For": "203.0.113.8"},
                               allow_redirects=False)
    assert blocked.status == 429 and other.status == 401
    assert json.dumps(dict(blocked.headers)).count("Retry-After") == 1
