"""A Slack stand-in: the Web API methods the notifier calls (`chat.postMessage`, `chat.update`,
`conversations.history`, `auth.test`) under `/api/`, and incoming webhooks under
`/services/...`, on 127.0.0.1.

Web API answers HTTP 200 with `{"ok": false, "error": ...}` for application errors and HTTP 429
with `Retry-After` and `{"ok": false, "error": "ratelimited"}` when rate limited, as Slack does.
Webhooks answer the plain text `ok`, or a plain-text error code. Messages are kept per channel,
with their thread, blocks and metadata, so tests assert what a reader of the channel would see.
Faults are scripted through `FakeHTTPServer.inject`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from tests.fakes.jira.fakehttp import FakeHTTPServer, Request, Response


@dataclass
class Message:
    channel: str  # channel id
    ts: str
    text: str
    blocks: list[Any]
    thread_ts: str | None = None
    metadata: dict[str, Any] | None = None
    edits: int = 0
    via: str = "web"  # web or webhook


@dataclass
class Channel:
    id: str
    name: str
    messages: list[Message] = field(default_factory=list)


class FakeSlack(FakeHTTPServer):
    def __init__(self, token: str = "xoxb-not-a-real-token-0000", channels: tuple[str, ...] = (
            "gpu-infra", "gpu-alerts", "team-vision")) -> None:
        super().__init__("slack")
        self.token = token
        self.channels: dict[str, Channel] = {}
        for n, name in enumerate(channels, 1):
            self.channels[f"C{n:08d}"] = Channel(f"C{n:08d}", name)
        self.webhooks: dict[str, str] = {}  # path -> channel id
        self._clock = 1700000000_000000
        self.error_body = lambda status: {"ok": False, "error": "ratelimited" if status == 429 else "fatal_error"}
        self.route("POST", r"/api/auth\.test", self._auth_test)
        self.route("POST", r"/api/chat\.postMessage", self._post)
        self.route("POST", r"/api/chat\.update", self._update)
        self.route("POST", r"/api/conversations\.history", self._history)
        self.route("GET", r"/api/conversations\.history", self._history)
        self.route("POST", r"/api/conversations\.replies", self._replies)
        self.route("GET", r"/api/conversations\.replies", self._replies)
        self.route("POST", r"/services/(.+)", self._webhook)

    # --- setup and queries ---------------------------------------------------------------------
    def add_webhook(self, channel_name: str) -> str:
        cid = self.channel_id(channel_name)
        assert cid is not None, channel_name
        path = f"T0000/B{len(self.webhooks) + 1:07d}/hooksecret{len(self.webhooks) + 1:04d}"
        self.webhooks[path] = cid
        return f"{self.url}/services/{path}"

    def channel_id(self, name_or_id: str) -> str | None:
        if name_or_id in self.channels:
            return name_or_id
        name = name_or_id.lstrip("#")
        return next((c.id for c in self.channels.values() if c.name == name), None)

    def messages(self, channel: str) -> list[Message]:
        cid = self.channel_id(channel)
        with self._lock:
            return list(self.channels[cid].messages) if cid else []

    def roots(self, channel: str) -> list[Message]:
        return [m for m in self.messages(channel) if m.thread_ts is None]

    def replies(self, channel: str, ts: str) -> list[Message]:
        return [m for m in self.messages(channel) if m.thread_ts == ts]

    # --- serving -------------------------------------------------------------------------------
    def _args(self, req: Request) -> dict[str, Any]:
        ctype = req.headers.get("content-type", "")
        if "json" in ctype:
            data = req.json() or {}
        else:
            data = {k: v[0] for k, v in parse_qs(req.body.decode()).items()}
            data.update({k: v[0] for k, v in req.query.items()})
        for key in ("blocks", "metadata"):
            if isinstance(data.get(key), str):
                data[key] = json.loads(data[key])
        return data

    def _authed(self, req: Request) -> bool:
        return req.headers.get("authorization") == f"Bearer {self.token}"

    def _next_ts(self) -> str:
        self._clock += 100
        return f"{self._clock // 1_000_000}.{self._clock % 1_000_000:06d}"

    def _auth_test(self, req: Request) -> Response:
        if not self._authed(req):
            return Response.json(200, {"ok": False, "error": "invalid_auth"})
        return Response.json(200, {"ok": True, "team": "stand-in", "user": "xidpipe", "bot_id": "B1"})

    def _post(self, req: Request) -> Response:
        if not self._authed(req):
            return Response.json(200, {"ok": False, "error": "invalid_auth"})
        a = self._args(req)
        cid = self.channel_id(str(a.get("channel", "")))
        if cid is None:
            return Response.json(200, {"ok": False, "error": "channel_not_found"})
        if not a.get("text") and not a.get("blocks"):
            return Response.json(200, {"ok": False, "error": "no_text"})
        thread = a.get("thread_ts")
        if thread and not any(m.ts == thread for m in self.channels[cid].messages):
            return Response.json(200, {"ok": False, "error": "thread_not_found"})
        msg = Message(cid, self._next_ts(), a.get("text", ""), a.get("blocks") or [], thread, a.get("metadata"))
        self.channels[cid].messages.append(msg)
        return Response.json(200, {"ok": True, "channel": cid, "ts": msg.ts,
                                   "message": {"text": msg.text, "ts": msg.ts, "blocks": msg.blocks}})

    def _update(self, req: Request) -> Response:
        if not self._authed(req):
            return Response.json(200, {"ok": False, "error": "invalid_auth"})
        a = self._args(req)
        cid = self.channel_id(str(a.get("channel", "")))
        if cid is None:
            return Response.json(200, {"ok": False, "error": "channel_not_found"})
        msg = next((m for m in self.channels[cid].messages if m.ts == a.get("ts")), None)
        if msg is None:
            return Response.json(200, {"ok": False, "error": "message_not_found"})
        msg.text = a.get("text", msg.text)
        msg.blocks = a.get("blocks") or msg.blocks
        if a.get("metadata"):
            msg.metadata = a["metadata"]
        msg.edits += 1
        return Response.json(200, {"ok": True, "channel": cid, "ts": msg.ts, "text": msg.text})

    def _history(self, req: Request) -> Response:
        if not self._authed(req):
            return Response.json(200, {"ok": False, "error": "invalid_auth"})
        a = self._args(req)
        cid = self.channel_id(str(a.get("channel", "")))
        if cid is None:
            return Response.json(200, {"ok": False, "error": "channel_not_found"})
        limit = int(a.get("limit", 100))
        with_meta = str(a.get("include_all_metadata", "")).lower() in ("1", "true")
        out = []
        for m in reversed(self.channels[cid].messages):  # newest first, as Slack
            if m.thread_ts is not None:
                continue  # history lists top-level messages (and thread parents) only
            item: dict[str, Any] = {"type": "message", "ts": m.ts, "text": m.text}
            if with_meta and m.metadata:
                item["metadata"] = m.metadata
            out.append(item)
        return Response.json(200, {"ok": True, "messages": out[:limit], "has_more": len(out) > limit})

    def _replies(self, req: Request) -> Response:
        if not self._authed(req):
            return Response.json(200, {"ok": False, "error": "invalid_auth"})
        a = self._args(req)
        cid = self.channel_id(str(a.get("channel", "")))
        if cid is None:
            return Response.json(200, {"ok": False, "error": "channel_not_found"})
        ts = a.get("ts")
        thread = [m for m in self.channels[cid].messages if m.ts == ts or m.thread_ts == ts]
        if not thread:
            return Response.json(200, {"ok": False, "error": "thread_not_found"})
        with_meta = str(a.get("include_all_metadata", "")).lower() in ("1", "true")
        out = [{"type": "message", "ts": m.ts, "thread_ts": ts, "text": m.text,
                **({"metadata": m.metadata} if with_meta and m.metadata else {})} for m in thread]
        return Response.json(200, {"ok": True, "messages": out, "has_more": False})

    def _webhook(self, req: Request, path: str) -> Response:
        cid = self.webhooks.get(path)
        if cid is None:
            return Response.text(404, "no_service")
        try:
            a = json.loads(req.body or b"{}")
        except ValueError:
            return Response.text(400, "invalid_payload")
        if not a.get("text") and not a.get("blocks"):
            return Response.text(400, "no_text")
        msg = Message(cid, self._next_ts(), a.get("text", ""), a.get("blocks") or [], via="webhook")
        self.channels[cid].messages.append(msg)
        return Response.text(200, "ok")
