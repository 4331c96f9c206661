"""docs/api.md's word on tokens is the server's: the paths it lists answer without one, and every
other route of the app refuses a request that has none."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from history.engine import make_engine
from history.migrate import upgrade
from tests.docs.doctext import ROOT, text_of
from xidpipe.web.app import make_app
from xidpipe.web.db import Database
from xidpipe.web.tokens import load_tokens

_SAMPLE = {"id": "v2:0000", "ident": "serial:0", "filename": "style.css"}


def tokenless() -> list[str]:
    """The paths docs/api.md says need no token."""
    text = " ".join(text_of(ROOT / "docs" / "api.md").split())
    sentence = text.split("Every request except", 1)[1].split("needs a token", 1)[0]
    return re.findall(r"`(/[^`]*)`", sentence)


def _path(canonical: str) -> str:
    return re.sub(r"\{(\w+)(?::[^}]*)?\}", lambda m: _SAMPLE.get(m.group(1), "x"), canonical)


async def test_the_paths_that_need_no_token_are_the_ones_the_docs_list(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"reader read {secrets.token_urlsafe(32)}\n")
    tokens.chmod(0o600)
    listed = tokenless()
    assert "/readyz" in listed and "/healthz" in listed, listed
    db = Database(url)
    app = make_app(db, load_tokens(tokens), session_secret=b"s" * 32)
    async with TestClient(TestServer(app)) as client:
        answered: dict[str, int] = {}
        for route in app.router.routes():
            if route.method == "HEAD":
                continue
            info = route.resource.get_info() if route.resource is not None else {}
            path = _path(str(info.get("path") or info.get("formatter") or (info.get("prefix", "") + "/style.css")))
            response = await client.request(route.method, path, allow_redirects=False)
            answered[path] = min(answered.get(path, 999), response.status)
    db.close()
    open_paths = {p for p, status in answered.items() if status not in (401, 303)}
    said = {p for p in answered if any(p == x or (x.endswith("/") and p.startswith(x)) for x in listed)}
    assert open_paths == said, f"answered without a token: {sorted(open_paths)}; docs/api.md says {listed}"
    assert all(any(p == x or (x.endswith("/") and p.startswith(x)) for p in answered) for x in listed), listed
