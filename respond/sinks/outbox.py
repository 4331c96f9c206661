"""The embedded defaults: with no Jira or Slack configured, tickets and chat messages are written,
with the same content, as files in a local outbox directory.

    var/outbox/jira/<ticket>/ticket.md      summary, fields and the dossier (the ticket body)
    var/outbox/jira/<ticket>/ticket.json    fields, labels, status, links (what Jira would hold)
    var/outbox/jira/<ticket>/description.wiki, description.adf.json   the body as Jira Server / Cloud get it
    var/outbox/jira/<ticket>/dossier.md, dossier.json, node-*.txt ...   the attachments
    var/outbox/jira/<ticket>/comments/<n>.md
    var/outbox/slack/<channel>/<message>.json   {"text", "blocks", "thread_ts", ...} as chat.postMessage takes

`<ticket>` is derived from the incident, so a redelivery overwrites the same files: never a second
ticket. Writes are atomic (a temporary file renamed into place).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models.ticket_policy import INCIDENT_LABEL_PREFIX, TicketFields
from respond.errors import PermanentError
from respond.sinks.ports import Posted, TicketBody, TicketInfo

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-.") or "unnamed"


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


class OutboxTracker:
    """`TicketTracker` on files under `<root>/jira/`."""

    name = "outbox"

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "jira"

    def _dir(self, key: str) -> Path:
        return self.root / safe_name(key)

    def _meta(self, key: str) -> dict[str, Any] | None:
        path = self._dir(key) / "ticket.json"
        return json.loads(path.read_text()) if path.exists() else None

    def _info(self, meta: dict[str, Any]) -> TicketInfo:
        key = meta["key"]
        return TicketInfo(key, self.url(key), meta.get("status") == "Done", frozenset(meta.get("labels", [])),
                          frozenset(meta.get("attachments", [])))

    def _save(self, meta: dict[str, Any]) -> None:
        write_atomic(self._dir(meta["key"]) / "ticket.json", _json(meta))

    def url(self, key: str) -> str:
        return self._dir(key).resolve().as_uri()

    def find_by_label(self, label: str) -> list[TicketInfo]:
        if not self.root.exists():
            return []
        metas = [json.loads(p.read_text()) for p in sorted(self.root.glob("*/ticket.json"))]
        return [self._info(m) for m in sorted(metas, key=lambda m: m["created_at"]) if label in m.get("labels", [])]

    def get(self, key: str) -> TicketInfo | None:
        meta = self._meta(key)
        return self._info(meta) if meta else None

    def create(self, fields: TicketFields, summary: str, description: TicketBody) -> TicketInfo:
        incident = next((x for x in fields.labels if x.startswith(INCIDENT_LABEL_PREFIX)), None)
        if incident is None:
            raise PermanentError("an outbox ticket needs an incident label")
        key = incident.removeprefix(INCIDENT_LABEL_PREFIX)
        old = self._meta(key) or {}
        meta = {
            "key": key, "summary": summary, "project": fields.project, "issue_type": fields.issue_type,
            "priority": fields.priority, "components": list(fields.components),
            "labels": sorted(set(fields.labels) | set(old.get("labels", []))), "status": old.get("status", "Open"),
            "attachments": old.get("attachments", []), "links": old.get("links", []),
            "created_at": old.get("created_at", datetime.now(UTC).isoformat()),
        }
        head = [f"# {summary}", "", f"- Project: {fields.project}", f"- Issue type: {fields.issue_type}",
                f"- Priority: {fields.priority}", f"- Components: {', '.join(fields.components) or 'none'}",
                f"- Labels: {', '.join(meta['labels'])}", "", "---", ""]
        write_atomic(self._dir(key) / "ticket.md", ("\n".join(head) + description.markdown).encode())
        write_atomic(self._dir(key) / "description.wiki", description.wiki.encode())
        write_atomic(self._dir(key) / "description.adf.json", _json(description.adf))
        self._save(meta)
        return self._info(meta)

    def add_labels(self, key: str, labels: tuple[str, ...]) -> None:
        meta = self._require(key)
        meta["labels"] = sorted(set(meta["labels"]) | set(labels))
        self._save(meta)

    def _require(self, key: str) -> dict[str, Any]:
        meta = self._meta(key)
        if meta is None:
            raise PermanentError(f"outbox ticket {key} does not exist", 404)
        return meta

    def comments(self, key: str) -> list[str]:
        folder = self._dir(key) / "comments"
        return [p.read_text() for p in sorted(folder.glob("*.md"))] if folder.exists() else []

    def comment(self, key: str, body: str, marker: str) -> bool:
        self._require(key)
        existing = self.comments(key)
        if any(marker in c for c in existing):
            return False
        write_atomic(self._dir(key) / "comments" / f"{len(existing) + 1:04d}.md", f"{body}\n\n{marker}\n".encode())
        return True

    def attach(self, key: str, files: Mapping[str, bytes]) -> list[str]:
        meta = self._require(key)
        done = []
        for name in sorted(files):
            fname = safe_name(name)
            if fname in ("ticket.md", "ticket.json", "comments", "description.wiki", "description.adf.json"):
                fname = f"attachment-{fname}"
            write_atomic(self._dir(key) / fname, files[name])  # overwrite: idempotent
            if name not in meta["attachments"]:
                meta["attachments"].append(name)
                done.append(name)
        self._save(meta)
        return done

    def reopen(self, key: str, transition: str) -> None:
        meta = self._require(key)
        if meta["status"] == "Done":
            meta["status"] = "Reopened"
            self._save(meta)

    def resolve(self, key: str) -> None:
        """What a person closing the ticket does (tests use it)."""
        meta = self._require(key)
        meta["status"] = "Done"
        self._save(meta)

    def link(self, key: str, other_key: str, link_type: str) -> None:
        meta = self._require(key)
        link = {"type": link_type, "key": other_key}
        if link not in meta["links"]:
            meta["links"].append(link)
            self._save(meta)


class OutboxChat:
    """`ChatTransport` on files under `<root>/slack/<channel>/`."""

    name = "outbox"
    threads = True

    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "slack"

    def _path(self, channel: str, key: str) -> Path:
        return self.root / safe_name(channel.lstrip("#")) / f"{safe_name(key)}.json"

    def post(self, channel: str, message: dict[str, Any], key: str, thread_ts: str | None = None) -> Posted:
        ts = safe_name(key)
        record = {"channel": channel, "ts": ts, "thread_ts": thread_ts, "key": key, "text": message.get("text", ""),
                  "blocks": message.get("blocks", []), "written_at": datetime.now(UTC).isoformat()}
        write_atomic(self._path(channel, key), _json(record))
        return Posted(channel, ts)

    def update(self, channel: str, ts: str, message: dict[str, Any], key: str) -> None:
        path = self._path(channel, ts)
        if not path.exists():
            raise PermanentError(f"no outbox message {ts} in {channel}", 404)
        record = json.loads(path.read_text())
        record.update(text=message.get("text", ""), blocks=message.get("blocks", []), edits=record.get("edits", 0) + 1)
        write_atomic(path, _json(record))

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        return Posted(channel, safe_name(key)) if self._path(channel, key).exists() else None

    def messages(self, channel: str) -> list[dict[str, Any]]:
        folder = self.root / safe_name(channel.lstrip("#"))
        if not folder.exists():
            return []
        return sorted((json.loads(p.read_text()) for p in folder.glob("*.json")), key=lambda r: r["written_at"])
