"""The JSON API under /api/v1/: one route table, from which both the aiohttp routes and the
OpenAPI 3.1 description are made, so the description is exactly what the server does."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

from aiohttp import web

from history.queries import GpuFilter, IncidentFilter
from models.vocabulary import ComponentKind, values
from xidpipe.web import data
from xidpipe.web.db import Database
from xidpipe.web.guard import MAX_JSON_DEPTH, json_depth_ok, log_text
from xidpipe.web.keys import DB_KEY, PRINCIPAL_KEY
from xidpipe.web.params import Param, parse_query
from xidpipe.web.problems import PROBLEM_TYPE, Problem
from xidpipe.web.schemas import LIFECYCLE, PEOPLES_STEPS, components, ref
from xidpipe.web.tokens import Principal

log = logging.getLogger(__name__)

API = "/api/v1"
MAX_PAGE = 500  # rows per page
MAX_OFFSET = 1_000_000_000
HEATMAP_DAYS = 14  # the default window, ending today (UTC)
HEATMAP_MAX_DAYS = 366  # a longer window is cut to its last 366 days
REASON_MAX = 2000

Handler = Callable[[web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]


def _paging(default_limit: int = 50) -> tuple[Param, ...]:
    return (Param("limit", "integer", "page size", minimum=1, maximum=MAX_PAGE, default=default_limit),
            Param("offset", "integer", "rows to skip", minimum=0, maximum=MAX_OFFSET, default=0))


INCIDENT_FILTERS: tuple[Param, ...] = (
    Param("node", "string", "node name"),
    Param("gpu", "string", "board serial, GPU UUID or PCI address"),
    Param("xid", "integer", "an event of the incident has this Xid", minimum=0, maximum=65535),
    Param("category", "string", "application, suspected_hardware, hardware, driver, interconnect, ..."),
    Param("status", "string", "open: faults still arriving; resolved: quiet", enum=("open", "resolved")),
    Param("lifecycle", "string", "the incident's lifecycle state", enum=LIFECYCLE),
    Param("component", "string", "what the incident is about: a GPU, an NVSwitch, a node's driver, a workload, "
          "or the fleet (one fault family on many nodes, a tripped cordon breaker)", enum=values(ComponentKind)),
    Param("since", "date-time", "last seen at or after this time (RFC 3339; a date means its midnight UTC)"),
    Param("until", "date-time", "first seen before this time"),
    Param("namespace", "string", "a pod of this namespace was hit"),
    Param("owner", "string", "a workload whose name contains this was hit"),
    Param("sort", "string", "newest first by this time, or most events first",
          enum=("last_seen", "first_seen", "count"), default="last_seen"),
    *_paging(),
)
GPU_FILTERS: tuple[Param, ...] = (
    Param("node", "string", "the node the card sits in now"),
    Param("model", "string", "a part of the GPU model name, any case: h100"),
    Param("state", "string", "ledger state of the card", enum=("in_service", "missing", "retired", "conflict")),
    *_paging(),
)
STATS_PARAMS = (Param("since", "date-time", "only what was seen at or after this time"),
                Param("top", "integer", "entries in the top-N lists", minimum=1, maximum=100, default=10))
HEATMAP_PARAMS = (Param("since", "date", f"first day (UTC); default: {HEATMAP_DAYS - 1} days before `until`"),
                  Param("until", "date", "last day (UTC), included; default: today"))
INCIDENT_ID = Param("id", "string", "incident id, or a unique prefix of it or of its fingerprint", location="path",
                    max_length=512)
GPU_ID = Param("ident", "string", "board serial, GPU UUID or ledger card key", location="path", max_length=512)


@dataclass(frozen=True, slots=True)
class Operation:
    method: Literal["GET", "POST"]
    path: str
    operation_id: str
    summary: str
    handler: Handler
    ok: str  # schema name of the 200 body
    params: tuple[Param, ...] = ()
    auth: Literal["none", "read", "operator"] = "read"
    body: str | None = None
    not_found: bool = False
    conflict: bool = False
    description: str = ""

    @property
    def path_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.location == "path")


def principal_of(request: web.Request) -> Principal | None:
    return request.get(PRINCIPAL_KEY)


def _json(body: Any, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=lambda v: json.dumps(v, default=str))


async def _healthz(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    return _json({"status": "ok"})


async def _openapi(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    return _json(OPENAPI)


def incident_filter(args: dict[str, Any]) -> IncidentFilter:
    return IncidentFilter(node=args["node"], gpu=args["gpu"], xid=args["xid"], category=args["category"],
                          status=args["status"], lifecycle=args["lifecycle"], since=args["since"],
                          until=args["until"], namespace=args["namespace"], owner=args["owner"],
                          component=args["component"])


async def _incidents(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    db = request.app[DB_KEY]
    return _json(await db.read(data.list_incidents, incident_filter(args), args["sort"], args["limit"],
                               args["offset"]))


async def _incident(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    found = await request.app[DB_KEY].read(data.incident_detail, args["id"])
    if found is None:
        raise Problem(404, "Not found", f"no incident {args['id']!r} (or the prefix is not unique)")
    return _json(found)


def transition_body(raw: bytes) -> tuple[str, str]:
    if not json_depth_ok(raw):
        raise Problem(400, "Bad request body", f"the JSON nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Problem(400, "Bad request body", "expected a JSON object {\"to\": ..., \"reason\": ...}") from None
    if not isinstance(body, dict):
        raise Problem(400, "Bad request body", "expected a JSON object {\"to\": ..., \"reason\": ...}")
    extra = sorted(set(body) - {"to", "reason"})
    if extra:
        raise Problem(400, "Bad request body", f"unknown field(s): {', '.join(extra)[:200]}")
    to, reason = body.get("to"), body.get("reason")
    if not isinstance(to, str) or to not in PEOPLES_STEPS:
        raise Problem(400, "Bad request body", f"`to` must be one of {', '.join(PEOPLES_STEPS)} (mitigated and "
                      "ticketed are recorded by the responder)")
    if not isinstance(reason, str) or not reason.strip() or len(reason) > REASON_MAX or "\x00" in reason:
        raise Problem(400, "Bad request body", f"`reason` must be non-blank text of at most {REASON_MAX} characters")
    return to, reason.strip()


async def _transition(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    who = principal_of(request)
    assert who is not None  # the auth middleware let only operators through
    to, reason = transition_body(await request.read())
    try:
        done = await request.app[DB_KEY].write(data.transition, args["id"], to, who.name, reason)
    except LookupError:
        raise Problem(404, "Not found", f"no incident {args['id']!r} (or the prefix is not unique)") from None
    except ValueError as exc:
        raise Problem(409, "Transition not allowed", str(exc)) from None
    log.info("incident %s: lifecycle %s -> %s by %s: %s", log_text(args["id"], 200), done.get("from"),
             done.get("to"), who.name, log_text(reason), extra={"incident": args["id"]})
    return _json(done)


async def _stats(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    return _json(await request.app[DB_KEY].read(data.stats, args["since"], args["top"]))


async def _gpus(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    f = GpuFilter(node=args["node"], model=args["model"], state=args["state"])
    return _json(await request.app[DB_KEY].read(data.list_gpus, f, args["limit"], args["offset"]))


async def _gpu(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    found = await request.app[DB_KEY].read(data.gpu_history, args["ident"])
    if found is None:
        raise Problem(404, "Not found", f"no GPU {args['ident']!r} in the ledger")
    return _json(found)


def heatmap_window(since: date | None, until: date | None, today: date | None = None) -> tuple[date, date]:
    """The days shown: `until` defaults to today, `since` to HEATMAP_DAYS days ending at `until`; a
    window longer than HEATMAP_MAX_DAYS keeps its last days; `since` after `until` is an empty window."""
    until = until or today or datetime.now(UTC).date()
    since = since or until - timedelta(days=HEATMAP_DAYS - 1)
    if (until - since).days >= HEATMAP_MAX_DAYS:
        since = until - timedelta(days=HEATMAP_MAX_DAYS - 1)
    return since, until


def day_start(d: date) -> datetime:
    return datetime.combine(d, time(0), tzinfo=UTC)


def day_end(d: date) -> datetime:
    """Midnight after `d` (a window's exclusive end); the last representable day ends at its last instant."""
    try:
        return day_start(d + timedelta(days=1))
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


async def heatmap_data(db: Database, since: date | None, until: date | None) -> dict[str, Any]:
    first, last = heatmap_window(since, until)
    if first > last:
        return {"since": None, "until": None, "days": [], "nodes": []}
    return await db.read(data.heatmap, day_start(first), day_end(last))


async def _heatmap(request: web.Request, args: dict[str, Any]) -> web.StreamResponse:
    return _json(await heatmap_data(request.app[DB_KEY], args["since"], args["until"]))


OPERATIONS: tuple[Operation, ...] = (
    Operation("GET", "/healthz", "healthz", "Liveness: the server answers", _healthz, "Health", auth="none"),
    Operation("GET", f"{API}/openapi.json", "openapi", "This OpenAPI description", _openapi, "", auth="none"),
    Operation("GET", f"{API}/incidents", "listIncidents", "Incidents, filtered, newest first, one page",
              _incidents, "IncidentPage", INCIDENT_FILTERS),
    Operation("GET", f"{API}/incidents/{{id}}", "getIncident", "One incident: dossier, timeline, transitions",
              _incident, "IncidentDetail", (INCIDENT_ID,), not_found=True),
    Operation("POST", f"{API}/incidents/{{id}}/transitions", "transitionIncident",
              "Move an incident along its lifecycle (operator tokens only)", _transition, "Transition",
              (INCIDENT_ID,), auth="operator", body="TransitionRequest", not_found=True, conflict=True,
              description="The actor recorded is the token's name. 409 when the lifecycle does not allow the "
              "move from the incident's current state."),
    Operation("GET", f"{API}/gpus", "listGpus", "GPUs in the asset ledger, one page", _gpus, "GpuPage", GPU_FILTERS),
    Operation("GET", f"{API}/gpus/{{ident}}", "getGpu", "One card's ledger history: placements, swaps, incidents",
              _gpu, "GpuHistory", (GPU_ID,), not_found=True),
    Operation("GET", f"{API}/stats", "getStats", "Counts over the incident history", _stats, "Stats", STATS_PARAMS),
    Operation("GET", f"{API}/heatmap", "getHeatmap", "Hardware incidents per node and day", _heatmap, "Heatmap",
              HEATMAP_PARAMS),
)


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, "content": {PROBLEM_TYPE: {"schema": ref("Problem")}}}


def _operation_spec(op: Operation) -> dict[str, Any]:
    ok_schema = {"type": "object"} if not op.ok else ref(op.ok)
    spec: dict[str, Any] = {
        "operationId": op.operation_id, "summary": op.summary,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": ok_schema}}}},
    }
    if op.description:
        spec["description"] = op.description
    if op.params:
        spec["parameters"] = [p.spec() for p in op.params]
    if op.body:
        spec["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(op.body)}}}
    r = spec["responses"]
    if op.params or op.body:
        r["400"] = _problem("a parameter or the body is not valid; `detail` says which and why")
    if op.auth == "none":
        spec["security"] = []
    else:
        r["401"] = {**_problem("no credentials, or a token or session that is not valid"),
                    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}}}
        r["429"] = {**_problem("too many failed tokens or logins from this address of late"),
                    "headers": {"Retry-After": {"description": "seconds until the next try",
                                                "schema": {"type": "integer"}}}}
    if op.auth == "operator":
        r["403"] = _problem("the token is read-only; this needs an operator token")
    if op.not_found:
        r["404"] = _problem("no such resource")
    if op.conflict:
        r["409"] = _problem("the lifecycle does not allow this transition now")
    return spec


def openapi_document() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation_spec(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "xidpipe incident history API", "version": "1.0.0",
                 "description": "Read the GPU incident history and the asset ledger; operators move incidents "
                 "along their lifecycle. Errors are RFC 9457 problem objects."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": components(),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "a token from the tokens file (role read or operator)"},
                "session": {"type": "apiKey", "in": "cookie", "name": "xidpipe_session",
                            "description": "the pages' login session; unsafe methods also need the X-CSRF-Token "
                            "header from the page"},
            },
        },
        "security": [{"bearer": []}, {"session": []}],
    }


OPENAPI = openapi_document()


def bind(op: Operation) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    query_params = tuple(p for p in op.params if p.location == "query")

    async def handle(request: web.Request) -> web.StreamResponse:
        args = parse_query(query_params, request.query)
        for p in op.path_params:
            args[p.name] = p.parse(request.match_info[p.name])
        return await op.handler(request, args)

    handle.__name__ = op.operation_id
    return handle


def add_routes(app: web.Application) -> None:
    for op in OPERATIONS:
        app.router.add_route(op.method, op.path, bind(op), name=op.operation_id)


def required_role(request: web.Request) -> Literal["none", "read", "operator"] | None:
    """The role an API route needs, or None when the path is no API route."""
    name = request.match_info.route.name
    for op in OPERATIONS:
        if op.operation_id == name:
            return op.auth
    return None
