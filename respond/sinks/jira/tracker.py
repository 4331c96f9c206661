"""The Jira adapter of the `TicketTracker` port, on the `jira` library (3.10.5).

Two flavors (`SinkSettings.jira_flavor`): `server` (Jira Server and Data Center) talks REST API v2
and renders descriptions (the `TicketBody` document) and comments in wiki markup; `cloud` talks
REST API v3 and renders them as ADF documents (v3 takes nothing else). Comment markers are
written as plain text in both, so a retried comment is recognised.

The library's own retries are off (`max_retries=0`): its ResilientSession sleeps 10·2^n s and
covers only 429 and 503. Retrying belongs to `tickets.TicketSink`, which re-reads the state
before each attempt so that a repeated request never writes twice (a create is preceded by a
search on the fingerprint label, a comment by a look for its marker, an attachment by a look at
the ticket's attachment names).

Errors: 429 and 5xx, connection failures and timeouts → `TemporaryError` (with Retry-After);
other 4xx → `PermanentError` carrying Jira's `errorMessages`/`errors`. `str(JIRAError)` includes
the request headers (the Authorization header among them), so it is never used: messages are
built from the status and Jira's error text, and scrubbed of the token.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import requests
from jira import JIRA, JIRAError
from pydantic import SecretStr

from models.dossier import JiraFlavor
from models.render import adf, jira_wiki
from models.render.doc import Paragraph, Span
from models.ticket_policy import TicketFields
from respond.errors import AmbiguousError, PermanentError, TemporaryError, scrub
from respond.sinks.ports import TicketBody, TicketInfo

log = logging.getLogger(__name__)
T = TypeVar("T")

DESCRIPTION_CAP = 30_000  # Jira's description field holds 32,767 characters; the full dossier is attached
_INFO_FIELDS = "status,labels,attachment"
_OPTIONAL_FIELDS = frozenset({"components", "priority", "assignee"})


class JiraTracker:
    name = "jira"

    def __init__(self, server: str, user: str, api_token: SecretStr, *, timeout_s: float = 10.0,
                 verify: bool | str = True, flavor: JiraFlavor = "server") -> None:
        self.server = server.rstrip("/")
        self.flavor = flavor
        self._user = user
        self._token = api_token
        self._timeout = timeout_s
        self._verify = verify
        self._client: JIRA | None = None

    def __repr__(self) -> str:
        return f"JiraTracker({self.server!r}, user={self._user!r}, flavor={self.flavor!r})"

    # --- plumbing --------------------------------------------------------------------------------
    def _jira(self) -> JIRA:
        if self._client is None:
            self._client = JIRA(
                server=self.server, basic_auth=(self._user, self._token.get_secret_value()), timeout=self._timeout,
                max_retries=0, options={"check_update": False, "verify": self._verify,
                                        "rest_api_version": "3" if self.flavor == "cloud" else "2"},
            )
        return self._client

    def _scrub(self, text: str) -> str:
        return scrub(text, (self._token.get_secret_value(),))

    def _call(self, what: str, fn: Callable[[JIRA], T]) -> T:
        try:
            return fn(self._jira())
        except JIRAError as exc:
            raise self._from_jira_error(what, exc) from None
        except requests.exceptions.ReadTimeout:
            raise AmbiguousError(f"Jira did not answer {what} within {self._timeout:g} s") from None
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise TemporaryError(f"Jira unreachable during {what}: {type(exc).__name__}") from None
        except requests.exceptions.RequestException as exc:
            raise TemporaryError(f"Jira request failed during {what}: {type(exc).__name__}") from None

    def _from_jira_error(self, what: str, exc: JIRAError) -> TemporaryError | PermanentError:
        status = exc.status_code
        detail = self._scrub(str(exc.text or "").strip()) or "no error message"
        message = f"Jira answered HTTP {status} to {what}: {detail}"
        if status is None and "Invalid transition" in detail:
            return PermanentError(f"Jira refused {what}: {detail}")
        if status is None or status == 429 or status >= 500:
            retry_after: float | None = None
            headers = getattr(exc.response, "headers", None) or {}
            try:
                retry_after = float(str(headers["Retry-After"])) if headers.get("Retry-After") else None
            except ValueError:
                retry_after = None
            return TemporaryError(message, status, retry_after)
        try:
            body = exc.response.json() if exc.response is not None else {}
        except ValueError:
            body = {}
        fields = tuple(sorted((body.get("errors") or {}) if isinstance(body, dict) else {}))
        return PermanentError(message, status, fields=fields)

    def _info(self, raw: Mapping[str, Any]) -> TicketInfo:
        fields = raw.get("fields") or {}
        status = fields.get("status") or {}
        resolved = (status.get("statusCategory") or {}).get("key") == "done"
        names = frozenset(str(a.get("filename")) for a in fields.get("attachment") or [])
        return TicketInfo(key=str(raw["key"]), url=self.url(str(raw["key"])), resolved=resolved,
                          labels=frozenset(fields.get("labels") or []), attachments=names)

    # --- the port --------------------------------------------------------------------------------
    def url(self, key: str) -> str:
        return f"{self.server}/browse/{key}"

    def find_by_label(self, label: str) -> list[TicketInfo]:
        jql = f'labels = "{label}" ORDER BY created ASC'
        issues = self._call("search", lambda j: j.search_issues(jql, maxResults=20, fields=_INFO_FIELDS))
        return [self._info(i.raw) for i in issues]

    def get(self, key: str) -> TicketInfo | None:
        try:
            issue = self._call(f"get {key}", lambda j: j.issue(key, fields=_INFO_FIELDS))
        except PermanentError as exc:
            if exc.status == 404:
                return None
            raise
        return self._info(issue.raw)

    def _description(self, body: TicketBody) -> str | dict[str, Any]:
        """The body in the flavor's format (ADF or wiki markup), cut at `DESCRIPTION_CAP`."""
        cut = "(cut: the full dossier is attached as dossier.md)"
        if self.flavor == "cloud":
            doc = adf.render(body.blocks)
            if len(json.dumps(doc)) <= DESCRIPTION_CAP:
                return doc
            doc["content"] = list(doc["content"])
            while doc["content"] and len(json.dumps(doc)) > DESCRIPTION_CAP:
                doc["content"].pop()
            doc["content"].append(adf.paragraph((Span(cut),)))
            return doc
        wiki = jira_wiki.render(body.blocks)
        if len(wiki) <= DESCRIPTION_CAP:
            return wiki
        # Cut between lines, outside any {noformat} block, so the markup stays whole.
        kept: list[str] = []
        size, opened = 0, False
        for ln in wiki.splitlines():
            if size + len(ln) + 1 > DESCRIPTION_CAP - 200:
                break
            kept.append(ln)
            size += len(ln) + 1
            opened = opened != (ln.strip() == "{noformat}")
        if opened:
            kept.append("{noformat}")
        return "\n".join(kept) + "\n\n" + jira_wiki.escape(cut) + "\n"

    def _comment_body(self, body: str, marker: str) -> str | dict[str, Any]:
        if self.flavor == "cloud":
            doc = adf.plain(body)
            doc["content"].append(adf.paragraph((Span(marker),)))
            return doc
        return jira_wiki.render([Paragraph((Span(ln),)) for ln in body.splitlines() if ln.strip()]) + f"\n{marker}"

    def create(self, fields: TicketFields, summary: str, description: TicketBody) -> TicketInfo:
        payload: dict[str, Any] = {
            "project": {"key": fields.project}, "issuetype": {"name": fields.issue_type},
            "summary": summary[:250], "description": self._description(description),
            "priority": {"name": fields.priority},
            "labels": list(fields.labels), "components": [{"name": c} for c in fields.components],
        }
        if fields.assignee:  # Jira Cloud names users by account id, Server and Data Center by user name
            payload["assignee"] = {"accountId" if self.flavor == "cloud" else "name": fields.assignee}
        try:
            issue = self._call("create issue", lambda j: j.create_issue(fields=payload, prefetch=False))
        except PermanentError as exc:
            optional = [f for f in exc.fields if f in _OPTIONAL_FIELDS]
            if exc.status != 400 or not optional or len(optional) != len(exc.fields):
                raise
            # A component, priority or assignee this Jira does not know must not keep the ticket from being written.
            log.warning("Jira refused %s: creating the ticket without them (%s)", ", ".join(optional), exc.message)
            for name in optional:
                payload.pop(name, None)
            issue = self._call("create issue", lambda j: j.create_issue(fields=payload, prefetch=False))
        key = str(issue.key)
        log.info("created Jira ticket %s", key, extra={"ticket": key, "project": fields.project})
        return TicketInfo(key, self.url(key), False, frozenset(fields.labels), frozenset())

    def add_labels(self, key: str, labels: tuple[str, ...]) -> None:
        def run(j: JIRA) -> None:
            issue = j.issue(key, fields="labels")
            missing = [x for x in labels if x not in (issue.raw["fields"].get("labels") or [])]
            if missing:
                issue.update(update={"labels": [{"add": x} for x in missing]})
        self._call(f"label {key}", run)

    def comment(self, key: str, body: str, marker: str) -> bool:
        existing = self._call(f"read comments of {key}", lambda j: j.comments(key))
        for c in existing:
            raw = (getattr(c, "raw", None) or {}).get("body") or ""
            if marker in (raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)):
                return False
        text = self._comment_body(body, marker)
        self._call(f"comment on {key}", lambda j: j.add_comment(key, text))
        return True

    def attach(self, key: str, files: Mapping[str, bytes]) -> list[str]:
        info = self.get(key)
        if info is None:
            raise PermanentError(f"Jira ticket {key} does not exist", 404)
        done: list[str] = []
        for name in sorted(files):
            if name in info.attachments:
                continue
            data = files[name]
            self._call(f"attach {name} to {key}",
                       lambda j, data=data, name=name: j.add_attachment(key, io.BytesIO(data), filename=name))  # type: ignore[misc]
            done.append(name)
        return done

    def reopen(self, key: str, transition: str) -> None:
        info = self.get(key)
        if info is None:
            raise PermanentError(f"Jira ticket {key} does not exist", 404)
        if not info.resolved:
            return
        self._call(f"reopen {key}", lambda j: j.transition_issue(key, transition))

    def resolve(self, key: str, transition: str) -> None:
        info = self.get(key)
        if info is None:
            raise PermanentError(f"Jira ticket {key} does not exist", 404)
        if info.resolved:
            return
        self._call(f"resolve {key}", lambda j: j.transition_issue(key, transition))

    def link(self, key: str, other_key: str, link_type: str) -> None:
        issue = self._call(f"get {key}", lambda j: j.issue(key, fields="issuelinks"))
        for link in issue.raw["fields"].get("issuelinks") or []:
            if other_key in ((link.get("outwardIssue") or {}).get("key"), (link.get("inwardIssue") or {}).get("key")):
                return
        self._call(f"link {key} to {other_key}",
                   lambda j: j.create_issue_link(link_type, inwardIssue=key, outwardIssue=other_key))
