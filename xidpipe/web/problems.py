"""Errors as RFC 9457 problem objects (`application/problem+json`): a status, a short title and a
detail that says what to change. Details never carry a token or a secret."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

PROBLEM_TYPE = "application/problem+json"


class Problem(Exception):
    def __init__(self, status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"type": "about:blank", "title": self.title, "status": self.status, "detail": self.detail}

    def response(self) -> web.Response:
        return web.Response(status=self.status, text=json.dumps(self.body()), content_type=PROBLEM_TYPE,
                            headers=self.headers)


def unauthorized(detail: str) -> Problem:
    return Problem(401, "Unauthorized", detail, {"WWW-Authenticate": 'Bearer realm="xidpipe"'})
