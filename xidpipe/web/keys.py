"""Typed keys of what the application holds."""

from __future__ import annotations

from aiohttp import web

from xidpipe.web.db import Database
from xidpipe.web.guard import Proxies, Throttle
from xidpipe.web.session import Sessions
from xidpipe.web.tokens import Principal, TokenStore

DB_KEY: web.AppKey[Database] = web.AppKey("db", Database)
SESSIONS_KEY: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
TOKENS_KEY: web.AppKey[TokenStore] = web.AppKey("tokens", TokenStore)
PROXIES_KEY: web.AppKey[Proxies] = web.AppKey("proxies", Proxies)
THROTTLE_KEY: web.AppKey[Throttle] = web.AppKey("throttle", Throttle)  # failed logins and tokens per client
PRINCIPAL_KEY: web.RequestKey[Principal] = web.RequestKey("principal", Principal)  # who made the request
