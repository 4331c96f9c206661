"""A Jira stand-in: the REST endpoints the `jira` library (3.10.5) really calls, on 127.0.0.1.

Server info (Server or Cloud deployment), fields, create / get / update issue (by key or numeric
id), comments, transitions (with a simple workflow: Open → Done → Reopened), attachments
(multipart field `file`, 403 without `X-Atlassian-Token: no-check` as Jira's XSRF check does),
issue links, and search in both forms: `GET /rest/api/2/search` (Server/DC) and the enhanced
`/rest/api/{2,3}/search/jql` (Cloud), with an optional index lag (`search_lag_s`). Errors have
Jira's body `{"errorMessages": [...], "errors": {...}}`. Basic auth is checked. Faults are
scripted through `FakeHTTPServer.inject`. Descriptions and comment bodies are checked as Jira would
take them (`validate`): ADF on `/rest/api/3`, wiki markup on `/rest/api/2`; a body that is not is
refused with 400 and kept in `refused_bodies`.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from tests.fakes.jira.fakehttp import FakeHTTPServer, Request, Response
from tests.fakes.jira.validate import adf_errors, wiki_errors

API = r"/rest/api/(?:2|3)"
_STATUSES = {"Open": "new", "In Progress": "indeterminate", "Done": "done", "Reopened": "new"}
_TRANSITIONS = {"11": ("Start Progress", "In Progress"), "31": ("Done", "Done"), "3": ("Reopen", "Reopened")}


@dataclass
class FakeIssue:
    id: str
    key: str
    fields: dict[str, Any]
    comments: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    attachment_data: dict[str, bytes] = field(default_factory=dict)  # attachment id -> content
    created: float = field(default_factory=time.monotonic)


def jira_error(status: int, messages: list[str] | None = None, errors: dict[str, str] | None = None) -> Response:
    return Response.json(status, {"errorMessages": messages or [], "errors": errors or {}})


class FakeJira(FakeHTTPServer):
    def __init__(self, user: str = "xidpipe-bot", token: str = "jira-api-token-not-real",
                 deployment: str = "Server", projects: tuple[str, ...] = ("GPU", "OPS")) -> None:
        super().__init__("jira")
        self.user = user
        self.token = token
        self.deployment = deployment
        self.projects = set(projects)
        self.search_lag_s = 0.0  # Jira's search index is eventually consistent: new issues show up this late
        self.priorities = {"Highest", "High", "Medium", "Low", "Lowest"}
        self.components = {"gpu-hardware", "nvlink-fabric", "gpu-driver", "gpu-fleet", "gpu-workloads"}
        self.users = {"oncall-gpu", "vision-lead"}  # user names on Server, account ids on Cloud
        self.issues: dict[str, FakeIssue] = {}
        self.refused_bodies: list[tuple[str, Any, list[str]]] = []  # (field, body, why)
        self._next_id = 10000
        self._next_att = 30000
        self.error_body = lambda status: {"errorMessages": [_REASONS.get(status, f"HTTP {status}")], "errors": {}}
        r = self.route
        r("GET", f"{API}/serverInfo", self._server_info)
        r("GET", "/rest/auth/1/session", lambda req: Response.json(200, {"name": self.user}))
        r("GET", f"{API}/field", self._fields)
        r("POST", f"{API}/issue", self._create)
        r("GET", f"{API}/issue/([^/]+)", self._get)
        r("PUT", f"{API}/issue/([^/]+)", self._update)
        r("GET", f"{API}/issue/([^/]+)/comment", self._comments)
        r("POST", f"{API}/issue/([^/]+)/comment", self._add_comment)
        r("GET", f"{API}/issue/([^/]+)/transitions", self._transitions)
        r("POST", f"{API}/issue/([^/]+)/transitions", self._transition)
        r("POST", f"{API}/issue/([^/]+)/attachments", self._attach)
        r("GET", f"{API}/issueLinkType", self._link_types)
        r("POST", f"{API}/issueLink", self._link)
        r("GET", f"{API}/search", self._search)
        r("GET", f"{API}/search/jql", self._search_jql)
        r("POST", f"{API}/search/jql", self._search_jql)

    # --- auth ----------------------------------------------------------------------------------
    def _handle(self, req: Request) -> Response:
        expected = "Basic " + base64.b64encode(f"{self.user}:{self.token}".encode()).decode()
        if req.headers.get("authorization") != expected:
            return jira_error(401, ["You are not authenticated. Authentication required to perform this operation."])
        return super()._handle(req)

    # --- helpers -------------------------------------------------------------------------------
    def issue(self, key_or_id: str) -> FakeIssue | None:
        return self.issues.get(key_or_id) or next((i for i in self.issues.values() if i.id == key_or_id), None)

    def _self(self, i: FakeIssue) -> str:
        return f"{self.url}/rest/api/2/issue/{i.id}"

    def _issue_json(self, i: FakeIssue) -> dict[str, Any]:
        fields = dict(i.fields)
        fields["attachment"] = i.attachments
        fields["comment"] = {"comments": i.comments, "total": len(i.comments), "maxResults": 50, "startAt": 0}
        fields["issuelinks"] = i.links
        return {"id": i.id, "key": i.key, "self": self._self(i), "fields": fields}

    def searchable(self, key: str, now: float | None = None) -> bool:
        issue = self.issues.get(key)
        return issue is not None and (now or time.monotonic()) - issue.created >= self.search_lag_s

    def set_status(self, key: str, status: str) -> None:
        with self._lock:
            issue = self.issues[key]
            issue.fields["status"] = _status(status)
            issue.fields["resolution"] = {"name": "Done"} if _STATUSES[status] == "done" else None

    def _body_errors(self, req: Request, name: str, body: Any) -> list[str]:
        why = adf_errors(body) if req.path.startswith("/rest/api/3/") else wiki_errors(body)
        if why:
            self.refused_bodies.append((name, body, why))
        return why

    # --- endpoints -----------------------------------------------------------------------------
    def _server_info(self, req: Request) -> Response:
        return Response.json(200, {"baseUrl": self.url, "version": "9.12.2", "versionNumbers": [9, 12, 2],
                                   "deploymentType": self.deployment, "buildNumber": 9120002,
                                   "serverTitle": "Jira (stand-in)"})

    def _fields(self, req: Request) -> Response:
        names = [("summary", "Summary"), ("description", "Description"), ("labels", "Labels"),
                 ("priority", "Priority"), ("components", "Component/s"), ("status", "Status"),
                 ("issuetype", "Issue Type"), ("project", "Project"), ("attachment", "Attachment")]
        return Response.json(200, [{"id": k, "key": k, "name": n, "custom": False, "navigable": True,
                                    "searchable": True, "clauseNames": [k]} for k, n in names])

    def _create(self, req: Request) -> Response:
        data = req.json() or {}
        f = data.get("fields") or {}
        errors: dict[str, str] = {}
        project = (f.get("project") or {}).get("key")
        if not project:
            errors["project"] = "project is required"
        elif project not in self.projects:
            errors["project"] = "valid project is required"
        if not f.get("summary"):
            errors["summary"] = "You must specify a summary of the issue."
        if not (f.get("issuetype") or {}).get("name"):
            errors["issuetype"] = "valid issue type is required"
        prio = (f.get("priority") or {}).get("name")
        if prio is not None and prio not in self.priorities:
            errors["priority"] = f"Priority name '{prio}' is not valid"
        unknown = [c.get("name") for c in f.get("components") or [] if c.get("name") not in self.components]
        if unknown:
            errors["components"] = f"Component name '{unknown[0]}' is not valid"
        if f.get("assignee") is not None:  # Cloud names a user by accountId, Server and Data Center by name
            who = (f["assignee"] or {}).get("accountId" if self.deployment == "Cloud" else "name")
            if who not in self.users:
                errors["assignee"] = f"User '{who}' does not exist."
        labels = f.get("labels") or []
        if any(" " in label for label in labels):
            errors["labels"] = "The label must not contain spaces."
        if "description" in f and f["description"] is not None:
            why = self._body_errors(req, "description", f["description"])
            if why:
                errors["description"] = "; ".join(why)
        if errors:
            return jira_error(400, [], errors)
        self._next_id += 1
        count = sum(1 for i in self.issues.values() if i.key.startswith(project + "-")) + 1
        key = f"{project}-{count}"
        fields = {**f, "status": _status("Open"), "resolution": None,
                  "project": {"key": project}, "labels": list(labels)}
        issue = FakeIssue(str(self._next_id), key, fields)
        self.issues[key] = issue
        return Response.json(201, {"id": issue.id, "key": key, "self": self._self(issue)})

    def _get(self, req: Request, key: str) -> Response:
        i = self.issue(key)
        if i is None:
            return jira_error(404, ["Issue Does Not Exist"])
        return Response.json(200, self._issue_json(i))

    def _update(self, req: Request, key: str) -> Response:
        i = self.issue(key)
        if i is None:
            return jira_error(404, ["Issue Does Not Exist"])
        data = req.json() or {}
        i.fields.update(data.get("fields") or {})
        for name, ops in (data.get("update") or {}).items():
            current = list(i.fields.get(name) or [])
            for op in ops:
                for verb, value in op.items():
                    if verb == "add" and value not in current:
                        current.append(value)
                    elif verb == "remove" and value in current:
                        current.remove(value)
                    elif verb == "set":
                        current = list(value)
            i.fields[name] = current
        return Response(204)

    def _comments(self, req: Request, key: str) -> Response:
        i = self.issue(key)
        if i is None:
            return jira_error(404, ["Issue Does Not Exist"])
        return Response.json(200, {"comments": i.comments, "startAt": 0, "maxResults": len(i.comments),
                                   "total": len(i.comments)})

    def _add_comment(self, req: Request, key: str) -> Response:
        i = self.issue(key)
        if i is None:
            return jira_error(404, ["Issue Does Not Exist"])
        body = (req.json() or {}).get("body")
        if not body:
            return jira_error(400, [], {"comment": "Comment body can not be empty!"})
        why = self._body_errors(req, "comment", body)
        if why:
            return jira_error(400, [], {"comment": "; ".join(why)})
        comment = {"id": str(20000 + sum(len(x.comments) for x in self.issues.values())), "body": body,
                   "author": {"name": self.user}, "self": f"{self._self(i)}/comment"}
        i.comments.append(comment)
        return Response.json(201, comment)

    def _available(self, i: FakeIssue) -> dict[str, tuple[str, str]]:
        status = i.fields["status"]["name"]
        if _STATUSES[status] == "done":
            return {"3": _TRANSITIONS["3"]}
        return {k: v for k, v in _TRANSITIONS.items() if k != "3"}

    def _transitions(self, req: Request, key: str) -> Response:
        i = self.issue(key)
        if i is None:
            return jira_error(404, ["Issue Does Not Exist"])
        return Response.json(200, {"transitions": [{"id": tid, "name": name, "to": _status(to)}
                                                   for tid, (name, to) in self._available(i).items()]})

    def _transition(self, req: Request, key: str) -> Response:
        i = self.issue(key)
        if i is None:
            return jira_error(404, ["Issue Does Not Exist"])
        data = req.json() or {}
        tid = str((data.get("transition") or {}).get("id"))
        available = self._available(i)
        if tid not in available:
            return jira_error(400, [f"Transition id '{tid}' is not valid for this issue."])
        self.set_status(i.key, available[tid][1])
        for op in (data.get("update") or {}).get("comment", []):
            self._add_comment(Request("POST", "", {}, {}, _dumps({"body": op["add"]["body"]}), 0.0), i.key)
        return Response(204)

    def _attach(self, req: Request, key: str) -> Response:
        if req.headers.get("x-atlassian-token", "").lower() != "no-check":
            return Response.text(403, "XSRF check failed")
        i = self.issue(key)
        if i is None:
            return jira_error(404, ["Issue Does Not Exist"])
        ctype = req.headers.get("content-type", "")
        msg = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + req.body)
        created = []
        for part in msg.iter_parts():
            if part.get_param("name", header="content-disposition") != "file":
                continue
            content = part.get_payload(decode=True) or b""
            self._next_att += 1
            att = {"id": str(self._next_att), "filename": part.get_filename(),
                   "size": len(content), "mimeType": part.get_content_type(),
                   "self": f"{self.url}/rest/api/2/attachment/{len(i.attachments)}"}
            i.attachments.append(att)
            i.attachment_data[att["id"]] = content
            created.append(att)
        if not created:
            return jira_error(400, ["No file was attached (multipart field 'file' expected)."])
        return Response.json(200, created)

    def _link_types(self, req: Request) -> Response:
        return Response.json(200, {"issueLinkTypes": [
            {"id": "10003", "name": "Relates", "inward": "relates to", "outward": "relates to"},
            {"id": "10000", "name": "Blocks", "inward": "is blocked by", "outward": "blocks"}]})

    def _link(self, req: Request) -> Response:
        data = req.json() or {}
        a = self.issue((data.get("inwardIssue") or {}).get("key", ""))
        b = self.issue((data.get("outwardIssue") or {}).get("key", ""))
        if a is None or b is None:
            return jira_error(404, ["Issue Does Not Exist"])
        name = (data.get("type") or {}).get("name")
        a.links.append({"type": {"name": name}, "outwardIssue": {"key": b.key}})
        b.links.append({"type": {"name": name}, "inwardIssue": {"key": a.key}})
        return Response(201)

    def _matching(self, jql: str) -> list[FakeIssue] | Response:
        clauses = [c.strip() for c in re.split(r"\s+AND\s+", re.sub(r"(?i)\s+ORDER BY.*$", "", jql)) if c.strip()]
        now = time.monotonic()
        found = [i for i in self.issues.values() if self.searchable(i.key, now)]
        for clause in clauses:
            m = re.fullmatch(r'(labels|project)\s*=\s*"?([^"]+)"?', clause)
            if not m:
                return jira_error(400, [f"Error in the JQL Query: unsupported clause '{clause}'."])
            name, value = m.groups()
            if name == "labels":
                found = [i for i in found if value in (i.fields.get("labels") or [])]
            else:
                found = [i for i in found if i.fields["project"]["key"] == value]
        return sorted(found, key=lambda i: int(i.id))

    def _search(self, req: Request) -> Response:
        if self.deployment == "Cloud":
            return jira_error(410, ["The requested API has been removed. Please migrate to /rest/api/3/search/jql."])
        found = self._matching(req.query.get("jql", [""])[0])
        if isinstance(found, Response):
            return found
        start = int(req.query.get("startAt", ["0"])[0])
        limit = int(req.query.get("maxResults", ["50"])[0])
        page = found[start:start + limit]
        return Response.json(200, {"startAt": start, "maxResults": limit, "total": len(found),
                                   "issues": [self._issue_json(i) for i in page]})

    def _search_jql(self, req: Request) -> Response:
        params = req.json() if req.method == "POST" else {k: v[0] for k, v in req.query.items()}
        found = self._matching(str(params.get("jql", "")))
        if isinstance(found, Response):
            return found
        limit = int(params.get("maxResults", 50))
        return Response.json(200, {"issues": [self._issue_json(i) for i in found[:limit]], "isLast": True})


_REASONS = {429: "Rate limit exceeded.", 500: "Internal server error", 503: "Service Unavailable",
            401: "You are not authenticated.", 403: "Forbidden", 404: "Not found"}


def _status(name: str) -> dict[str, Any]:
    return {"name": name, "statusCategory": {"key": _STATUSES[name]}}


def _dumps(data: Any) -> bytes:
    return json.dumps(data).encode()
