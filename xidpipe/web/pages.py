"""Server-rendered pages (Jinja2, autoescaped): incidents, one incident, GPUs, one GPU, the fleet
heatmap, and the login. Forms that change state carry a CSRF token bound to the session."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from history.queries import GpuFilter
from models.vocabulary import ComponentKind, values
from xidpipe.web import api, data, svg
from xidpipe.web.guard import failed_attempt, log_text, safe_next
from xidpipe.web.keys import DB_KEY, PROXIES_KEY, SESSIONS_KEY, THROTTLE_KEY, TOKENS_KEY
from xidpipe.web.params import parse_query
from xidpipe.web.problems import Problem
from xidpipe.web.schemas import LIFECYCLE, PEOPLES_STEPS
from xidpipe.web.session import COOKIE_NAME
from xidpipe.web.tokens import Principal

log = logging.getLogger(__name__)

ENV = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                  autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                  lstrip_blocks=True)
ENV.filters["q"] = lambda value: quote(str(value), safe=":@")


def _when(value: Any, seconds_only: bool = True) -> str:
    """An ISO time as people read it, in UTC: 2026-11-26 12:00:10 (with milliseconds when asked)."""
    if not value:
        return ""
    try:
        t = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    t = t.astimezone(UTC) if t.tzinfo else t
    return t.strftime("%Y-%m-%d %H:%M:%S") if seconds_only else t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


ENV.filters["when"] = _when


def _step(text: Any) -> Markup:
    """A runbook step: its `backticked` parts are commands, shown as code; everything escaped."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: plain text
        return escape(str(text))
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts))


ENV.filters["step"] = _step
PAGE_SIZE = 50


def _principal(request: web.Request) -> Principal | None:
    return api.principal_of(request)


def _csrf(request: web.Request) -> str:
    cookie = request.cookies.get(COOKIE_NAME, "")
    return request.app[SESSIONS_KEY].csrf(cookie) if cookie else ""


def render(request: web.Request, name: str, status: int = 200, **ctx: Any) -> web.Response:
    body = ENV.get_template(name).render(who=_principal(request), csrf=_csrf(request), path=request.path, **ctx)
    return web.Response(text=body, content_type="text/html", status=status)


async def error_page(request: web.Request, p: Problem) -> web.Response:
    resp = render(request, "error.html", status=p.status, problem=p)
    for k, v in p.headers.items():
        resp.headers[k] = v
    return resp


async def login_form(request: web.Request) -> web.StreamResponse:
    return render(request, "login.html", next=safe_next(request.query.get("next")), failed=False)


async def login_submit(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = str(form.get("token", "")).strip()
    nxt = safe_next(str(form.get("next", "")))
    who = request.app[TOKENS_KEY].verify(token) if token else None
    client = request.app[PROXIES_KEY].client(request)
    if who is None:
        failed_attempt(request, request.app[PROXIES_KEY], request.app[THROTTLE_KEY])  # a 429 past the limit
        log.info("login refused from %s", log_text(client, 64))
        return render(request, "login.html", status=401, next=nxt, failed=True)
    log.info("login: %s (%s) from %s", who.name, who.role, log_text(client, 64))
    resp = web.Response(status=303, headers={"Location": nxt})
    sessions = request.app[SESSIONS_KEY]
    resp.set_cookie(COOKIE_NAME, sessions.issue(who), max_age=sessions.ttl_s, path="/", httponly=True,
                    samesite="Strict", secure=request.app[PROXIES_KEY].secure(request))
    return resp


def _check_form_csrf(request: web.Request, form: Any) -> None:
    if request.headers.get("Authorization"):
        return  # a bearer token is not sent by a browser on its own: no cross-site request can carry it
    if not request.app[SESSIONS_KEY].check_csrf(request.cookies.get(COOKIE_NAME, ""), str(form.get("csrf", ""))):
        raise Problem(403, "Forbidden", "the form's CSRF token is missing or belongs to another session: "
                      "reload the page and try again")


async def logout(request: web.Request) -> web.StreamResponse:
    _check_form_csrf(request, await request.post())
    request.app[SESSIONS_KEY].revoke(request.cookies.get(COOKIE_NAME, ""))  # a copy of the cookie is dead too
    resp = web.Response(status=303, headers={"Location": "/login"})
    resp.del_cookie(COOKIE_NAME, path="/", httponly=True, samesite="Strict",
                    secure=request.app[PROXIES_KEY].secure(request))
    return resp


async def index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/incidents")


def _link(request: web.Request, **changes: Any) -> str:
    query = {k: v for k, v in request.query.items() if v != ""}
    query.update({k: str(v) for k, v in changes.items()})
    return f"{request.path}?{urlencode(query)}"


def _pager(request: web.Request, total: int, limit: int, offset: int) -> dict[str, Any]:
    return {
        "total": total, "first": offset + 1 if total else 0, "last": min(offset + limit, total),
        "prev": _link(request, offset=max(offset - limit, 0)) if offset > 0 else None,
        "next": _link(request, offset=offset + limit) if offset + limit < total else None,
    }


async def incidents(request: web.Request) -> web.StreamResponse:
    args = parse_query(api.INCIDENT_FILTERS, request.query, lenient=True)
    page = await request.app[DB_KEY].read(data.list_incidents, api.incident_filter(args), args["sort"],
                                          args["limit"], args["offset"])
    form = {p.name: request.query.get(p.name, "") for p in api.INCIDENT_FILTERS}
    return render(request, "incidents.html", page=page, form=form, lifecycles=LIFECYCLE,
                  components=values(ComponentKind), pager=_pager(request, page["total"], args["limit"], args["offset"]))


async def incident(request: web.Request) -> web.StreamResponse:
    ident = api.INCIDENT_ID.parse(request.match_info["id"])
    found = await request.app[DB_KEY].read(data.incident_detail, ident)
    if found is None:
        raise Problem(404, "Not found", f"no incident {ident!r} (or the prefix is not unique)")
    return render(request, "incident.html", d=found["dossier"], inc=found["incident"], timeline=found["timeline"],
                  transitions=found["transitions"], remediation=found["remediation"], steps=PEOPLES_STEPS,
                  done=_done(request.query.get("done")))


def _done(value: str | None) -> str | None:
    """The step the banner names after a transition: one of the lifecycle's own words, never the query's text."""
    return value if value in PEOPLES_STEPS else None


async def incident_transition(request: web.Request) -> web.StreamResponse:
    who = _principal(request)
    form = await request.post()
    _check_form_csrf(request, form)
    if who is None or not who.is_operator:
        raise Problem(403, "Forbidden", "moving an incident along its lifecycle needs an operator token")
    ident = api.INCIDENT_ID.parse(request.match_info["id"])
    to = str(form.get("to", ""))
    reason = str(form.get("reason", "")).strip()
    if to not in PEOPLES_STEPS:
        raise Problem(400, "Bad form", f"choose one of {', '.join(PEOPLES_STEPS)}")
    if not reason or len(reason) > api.REASON_MAX or "\x00" in reason:
        raise Problem(400, "Bad form", f"give a reason (at most {api.REASON_MAX} characters)")
    try:
        done = await request.app[DB_KEY].write(data.transition, ident, to, who.name, reason)
    except LookupError:
        raise Problem(404, "Not found", f"no incident {ident!r}") from None
    except ValueError as exc:
        raise Problem(409, "Transition not allowed", str(exc)) from None
    log.info("incident %s: lifecycle %s -> %s by %s (page): %s", log_text(ident, 200), done.get("from"),
             done.get("to"), who.name, log_text(reason), extra={"incident": ident})
    raise web.HTTPSeeOther(f"/incidents/{quote(ident, safe=':@')}?{urlencode({'done': to})}")


async def gpus(request: web.Request) -> web.StreamResponse:
    args = parse_query(api.GPU_FILTERS, request.query, lenient=True)
    f = GpuFilter(node=args["node"], model=args["model"], state=args["state"])
    page = await request.app[DB_KEY].read(data.list_gpus, f, args["limit"], args["offset"])
    form = {p.name: request.query.get(p.name, "") for p in api.GPU_FILTERS}
    return render(request, "gpus.html", page=page, form=form,
                  pager=_pager(request, page["total"], args["limit"], args["offset"]))


async def gpu(request: web.Request) -> web.StreamResponse:
    ident = api.GPU_ID.parse(request.match_info["ident"])
    found = await request.app[DB_KEY].read(data.gpu_history, ident)
    if found is None:
        raise Problem(404, "Not found", f"no GPU {ident!r} in the ledger")
    picture = svg.gpu_timeline_svg(found.get("placements") or [], found.get("incidents") or [])
    return render(request, "gpu.html", g=found, picture=picture)


async def heatmap(request: web.Request) -> web.StreamResponse:
    args = parse_query(api.HEATMAP_PARAMS, request.query, lenient=True)
    since, until = api.heatmap_window(args["since"], args["until"])
    hm = await api.heatmap_data(request.app[DB_KEY], args["since"], args["until"])
    total = sum(sum(n["counts"]) for n in hm["nodes"])
    return render(request, "heatmap.html", picture=svg.heatmap_svg(hm["days"], hm["nodes"]), hm=hm, total=total,
                  since=since.isoformat(), until=until.isoformat())


RELIABILITY_SECTIONS = (("by_pool", "pool"), ("by_node", "node"), ("by_card", "GPU card"))


async def reliability(request: web.Request) -> web.StreamResponse:
    args = parse_query(api.STATS_PARAMS, request.query, lenient=True)
    rel = (await request.app[DB_KEY].read(data.stats, args["since"], args["top"]))["reliability"]
    charts = {key: {"mttr": svg.bars_svg([(k, f["mean_time_to_resolve_s"]) for k, f in rel[key].items()],
                                         "mean time to resolve"),
                    "mtbi": svg.bars_svg([(k, f["mean_time_between_incidents_s"]) for k, f in rel[key].items()],
                                         "mean time between incidents")}
              for key, _ in RELIABILITY_SECTIONS}
    return render(request, "reliability.html", rel=rel, charts=charts, sections=RELIABILITY_SECTIONS,
                  since=request.query.get("since", ""), top=args["top"],
                  duration=lambda v: "n/a" if v is None else svg.duration_text(v))


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/login", login_form, name="login")
    r.add_post("/login", login_submit, name="login_submit")
    r.add_post("/logout", logout, name="page_logout")
    r.add_get("/", index, name="page_index")
    r.add_get("/incidents", incidents, name="page_incidents")
    r.add_get("/incidents/{id}", incident, name="page_incident")
    r.add_post("/incidents/{id}/transition", incident_transition, name="page_incident_transition")
    r.add_get("/gpus", gpus, name="page_gpus")
    r.add_get("/gpus/{ident}", gpu, name="page_gpu")
    r.add_get("/heatmap", heatmap, name="page_heatmap")
    r.add_get("/reliability", reliability, name="page_reliability")
