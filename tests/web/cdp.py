"""Headless Chromium (the Debian package) driven over the DevTools protocol with aiohttp's
websocket client: start it, open a page, navigate, evaluate JavaScript, take screenshots."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

CHROMIUM_CANDIDATES = ("chromium", "/usr/bin/chromium", "chromium-browser")
START_TIMEOUT_S = 30.0
LOAD_TIMEOUT_S = 20.0


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Chromium:
    """One headless browser with its own throwaway profile."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.profile = Path(tempfile.mkdtemp(prefix="xidpipe-chromium-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self) -> None:
        args = [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--hide-scrollbars", "--window-size=1400,1000",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}", "about:blank"]
        log = (self.profile / "chromium.log").open("wb")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if active.exists():
                first = active.read_text().splitlines()[:1]
                if first and first[0].isdigit():
                    self.port = int(first[0])
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        tail = (self.profile / "chromium.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"Chromium did not open its DevTools port: {tail}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    async def page(self, http: aiohttp.ClientSession) -> Page:
        async with http.get(f"http://127.0.0.1:{self.port}/json/list") as resp:
            targets = await resp.json()
        target = next(t for t in targets if t.get("type") == "page")
        ws = await http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024)
        page = Page(ws)
        await page.start()
        return page


class Page:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.log: list[dict[str, Any]] = []  # console messages and browser log entries (CSP violations ...)
        self.reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.reader = asyncio.create_task(self._read())
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            await self.send(domain)

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Log.entryAdded":
                self.log.append(data["params"]["entry"])
            elif data.get("method") == "Runtime.consoleAPICalled":
                self.log.append({"level": data["params"]["type"], "text": str(data["params"].get("args"))})

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self.ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[n] = fut
        await self.ws.send_str(json.dumps({"id": n, "method": method, "params": params}))
        reply = await asyncio.wait_for(fut, LOAD_TIMEOUT_S)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    async def eval(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = LOAD_TIMEOUT_S) -> Any:
        """Poll until `expression` is truthy (with a deadline, never a fixed sleep)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = await self.eval(expression)
            except RuntimeError:
                value = None  # the document is being replaced
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s} s for {expression}")
            await asyncio.sleep(0.05)

    async def goto(self, url: str, lands_on: str | None = None) -> None:
        """Navigate and wait until the document at `lands_on` (default: `url`; a redirect may differ) is loaded."""
        await self.eval("window.__replaced = true")
        await self.send("Page.navigate", url=url)
        await self.wait_for(f"!window.__replaced && document.readyState === 'complete' && "
                            f"location.href.startsWith({json.dumps(lands_on or url)})")

    async def submit(self, form_selector: str, fields: dict[str, str], then_path: str) -> None:
        """Fill the form's fields, press its submit button, wait until the browser is at `then_path`."""
        script = "".join(f"document.querySelector({json.dumps(form_selector)}).elements[{json.dumps(k)}].value = "
                         f"{json.dumps(v)};" for k, v in fields.items())
        # The old document is marked, so the wait below ends only in the new one.
        await self.eval(script + "window.__replaced = true;"
                        f"document.querySelector({json.dumps(form_selector + ' button[type=submit]')}).click(); true")
        await self.wait_for(f"!window.__replaced && location.pathname === {json.dumps(then_path)} && "
                            "document.readyState === 'complete'")

    async def screenshot(self, path: Path) -> None:
        metrics = await self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": min(size["width"], 1400), "height": min(size["height"], 6000), "scale": 1}
        shot = await self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))

    async def close(self) -> None:
        await self.ws.close()
        if self.reader is not None:
            await self.reader
