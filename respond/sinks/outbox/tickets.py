"""The outbox's `TicketTracker`: each ticket a folder of files under `<root>/jira/`, with what Jira
would hold (`ticket.json`), the body as Jira Server and Cloud get it and as Markdown, the
attachments and the comments. `<ticket>` is derived from the incident, so a redelivery overwrites
the same files: never a second ticket. A file is no page anyone else can open: the outbox has no
issue URL (`url` is None), so a chat message links the incident's page instead."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models.render import adf, jira_wiki, markdown
from models.ticket_policy import INCIDENT_LABEL_PREFIX, TicketFields
from respond.errors import PermanentError
from respond.sinks.outbox.files import json_bytes, safe_name, write_atomic
from respond.sinks.ports import TicketBody, TicketInfo


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
        write_atomic(self._dir(meta["key"]) / "ticket.json", json_bytes(meta))

    def url(self, key: str) -> str | None:
        """None: a folder on the responder's disk is no link for a reader (messages link the incident page)."""
        return None

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
            "priority": fields.priority, "assignee": fields.assignee, "components": list(fields.components),
            "labels": sorted(set(fields.labels) | set(old.get("labels", []))), "status": old.get("status", "Open"),
            "attachments": old.get("attachments", []), "links": old.get("links", []),
            "created_at": old.get("created_at", datetime.now(UTC).isoformat()),
        }
        head = [f"# {summary}", "", f"- Project: {fields.project}", f"- Issue type: {fields.issue_type}",
                f"- Priority: {fields.priority}", *([f"- Assignee: {fields.assignee}"] if fields.assignee else []),
                f"- Components: {', '.join(fields.components) or 'none'}",
                f"- Labels: {', '.join(meta['labels'])}", "", "---", ""]
        body = markdown.render(description.document(title_heading=True))
        write_atomic(self._dir(key) / "ticket.md", ("\n".join(head) + body).encode())
        write_atomic(self._dir(key) / "description.wiki", jira_wiki.render(description.blocks).encode())
        write_atomic(self._dir(key) / "description.adf.json", json_bytes(adf.render(description.blocks)))
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

    def resolve(self, key: str, transition: str = "Done") -> None:
        """Mark the ticket done (what the remediation loop does when the node returned, and a person closing it)."""
        meta = self._require(key)
        meta["status"] = "Done"
        self._save(meta)

    def link(self, key: str, other_key: str, link_type: str) -> None:
        meta = self._require(key)
        link = {"type": link_type, "key": other_key}
        if link not in meta["links"]:
            meta["links"].append(link)
            self._save(meta)
