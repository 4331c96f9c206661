"""The pages in a real headless Chromium (Debian's `chromium`) against `xidpipe serve` on a seeded
history: log in through the form, read the incident list, an incident, a GPU and the heatmap from
the DOM, move an incident through the operator's form, and save a screenshot of each page under
test-artifacts/web/. Without Chromium the test is skipped, under CI=true it fails."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.services import service_unavailable
from tests.web.cdp import Chromium, Page, find_chromium
from tests.web.conftest import OPERATOR_TOKEN, READ_TOKEN, RunningServer
from tests.web.seed import HOSTILE_PROCESS

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        service_unavailable("Chromium", "no chromium on PATH: install the Debian package `chromium` "
                            "(make system-packages)")
    browser = Chromium(binary)
    try:
        browser.start()
    except RuntimeError as exc:
        service_unavailable("Chromium", str(exc))
    try:
        yield browser
    finally:
        browser.stop()


@pytest.fixture
async def page(chromium: Chromium) -> AsyncIterator[Page]:
    async with aiohttp.ClientSession() as http:
        p = await chromium.page(http)
        try:
            yield p
        finally:
            await p.close()


async def login(page: Page, base: str, token: str, then: str = "/incidents") -> None:
    await page.send("Network.clearBrowserCookies")
    await page.goto(f"{base}{then}", lands_on=f"{base}/login")  # not logged in: sent to the login page
    await page.submit("#login-form", {"token": token}, then)


async def texts(page: Page, selector: str) -> list[str]:
    return list(await page.eval(f"[...document.querySelectorAll({selector!r})].map(e => e.textContent.trim())"))


async def test_pages_in_chromium(page: Page, server: RunningServer) -> None:
    base, seeded = server.base, server.seeded
    await login(page, base, OPERATOR_TOKEN)
    assert await page.eval("document.cookie") == ""  # the session cookie is HttpOnly
    assert await page.eval("getComputedStyle(document.querySelector('header.top')).backgroundColor") == \
        "rgb(31, 45, 61)"  # the stylesheet came from the server

    # The incident list, then filtered through the form.
    assert await page.eval("document.querySelector('#who').textContent") == "ops (operator)"
    rows = await texts(page, "#incidents tbody tr")
    assert len(rows) == 5 and sum("node-b" in r for r in rows) == 2
    assert await page.eval("document.querySelector('#pager-count').textContent") == "1–5 of 5"
    await page.screenshot(ARTIFACTS / "incidents.png")
    await page.submit("#filters", {"category": "hardware", "node": "node-b"}, "/incidents")
    rows = await texts(page, "#incidents tbody tr")
    assert len(rows) == 2 and all("hardware" in r and "node-b" in r for r in rows)

    # One incident: the dossier, the timeline, and a lifecycle step through the operator's form.
    await page.goto(f"{base}/incidents/{seeded.bert}")
    assert "Xid 13" in await page.eval("document.querySelector('#dossier-title').textContent")
    attribution = " ".join(await texts(page, "#attribution li"))
    assert "bert-1" in attribution and "team-nlp" in attribution and "pid 11" in attribution
    assert await texts(page, "#timeline tbody td:nth-child(2)") == ["Xid 13", "Xid 43"]
    assert await texts(page, "#timeline tbody td:nth-child(5)") == ["bert", "bert"]
    assert await texts(page, "#codes tbody td:first-child") == ["Xid 13", "Xid 43"]
    await page.screenshot(ARTIFACTS / "incident.png")
    await page.submit("#transition-form", {"to": "repaired", "reason": "reseated the card"},
                      f"/incidents/{seeded.bert}")
    assert await page.eval("document.querySelector('#transition-done').textContent") == "Moved to repaired."
    assert await page.eval("document.querySelector('#lifecycle').textContent") == "repaired"
    assert await texts(page, "#transitions tbody td:not(:first-child)") == ["open", "repaired", "ops",
                                                                            "reseated the card"]

    # Markup from the cluster is shown as text, never run.
    await page.goto(f"{base}/incidents/{seeded.hostile}")
    assert await page.eval("document.querySelectorAll('script').length") == 0
    assert HOSTILE_PROCESS in await page.eval("document.querySelector('#attribution').textContent")
    await page.goto(f"{base}/incidents?node=node-a")
    assert await page.eval("document.querySelectorAll('script').length") == 0

    # A GPU that was replaced: its placement ended, the swap, its incident, and the timeline picture.
    await page.goto(f"{base}/gpus/{seeded.swapped_serial}")
    assert seeded.swapped_serial in await page.eval("document.querySelector('#gpu-title').textContent")
    assert any("replaced" in r for r in await texts(page, "#ledger-events tbody tr"))
    assert len(await texts(page, "#placements tbody tr")) == 1
    assert len(await texts(page, "#gpu-incidents tbody tr")) == 1
    assert await page.eval("document.querySelectorAll('#gpu-timeline svg rect.placement').length") == 1
    assert await page.eval("document.querySelectorAll('#gpu-timeline svg .incident-mark').length") == 1
    await page.screenshot(ARTIFACTS / "gpu.png")

    # The fleet heatmap: node-b had two hardware incidents on 2026-11-27, node-c one on 2026-11-28.
    await page.goto(f"{base}/heatmap?since=2026-11-20&until=2026-11-29")
    summary = await page.eval("document.querySelector('#heatmap-summary').textContent")
    assert summary.startswith("3 hardware incidents on 2 nodes"), summary
    cells = await page.eval("Object.fromEntries([...document.querySelectorAll('#heatmap rect[data-count]')]"
                            ".filter(r => r.dataset.count !== '0').map(r => [r.dataset.node + ' ' + r.dataset.day,"
                            " Number(r.dataset.count)]))")
    assert cells == {"node-b 2026-11-27": 2, "node-c 2026-11-28": 1}
    assert await page.eval("document.querySelectorAll('#heatmap svg text.node-label').length") == 2
    await page.screenshot(ARTIFACTS / "heatmap.png")

    errors = [e for e in page.log if e.get("level") in ("error", "warning")]
    assert not errors, errors  # no Content-Security-Policy violation, no failed load


async def test_a_read_only_login_has_no_transition_form(page: Page, server: RunningServer) -> None:
    await login(page, server.base, READ_TOKEN, then=f"/incidents/{server.seeded.lost_c}")
    assert await page.eval("document.querySelector('#who').textContent") == "reader (read)"
    assert await page.eval("document.querySelector('#transition-form')") is None
    await page.screenshot(ARTIFACTS / "incident-read-only.png")
