"""The outbox's `ChatTransport`: each message a JSON file under `<root>/slack/<channel>/`, rendered
as Slack would get it (Block Kit, `respond.sinks.slack.blocks`) and as `chat.postMessage` takes it;
an edit rewrites the file, a thread reply is a file of its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models.chat_message import ChatMessage, GroupMessage
from respond.errors import PermanentError
from respond.sinks.outbox.files import json_bytes, safe_name, write_atomic
from respond.sinks.ports import Posted
from respond.sinks.slack.blocks import render


class OutboxChat:
    """`ChatTransport` on files under `<root>/slack/<channel>/`."""

    name = "outbox"
    threads = True

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "slack"

    def _path(self, channel: str, key: str) -> Path:
        return self.root / safe_name(channel.lstrip("#")) / f"{safe_name(key)}.json"

    def post(self, channel: str, message: ChatMessage, key: str, thread_ts: str | None = None) -> Posted:
        ts = safe_name(key)
        body = render(message)
        record = {"channel": channel, "ts": ts, "thread_ts": thread_ts, "key": key, "text": body["text"],
                  "blocks": body["blocks"], "written_at": datetime.now(UTC).isoformat()}
        write_atomic(self._path(channel, key), json_bytes(record))
        return Posted(channel, ts)

    def update(self, channel: str, ts: str, message: GroupMessage, key: str) -> None:
        path = self._path(channel, ts)
        if not path.exists():
            raise PermanentError(f"no outbox message {ts} in {channel}", 404)
        record = json.loads(path.read_text())
        body = render(message)
        record.update(text=body["text"], blocks=body["blocks"], edits=record.get("edits", 0) + 1)
        write_atomic(path, json_bytes(record))

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        return Posted(channel, safe_name(key)) if self._path(channel, key).exists() else None

    def messages(self, channel: str) -> list[dict[str, Any]]:
        folder = self.root / safe_name(channel.lstrip("#"))
        if not folder.exists():
            return []
        return sorted((json.loads(p.read_text()) for p in folder.glob("*.json")), key=lambda r: r["written_at"])
