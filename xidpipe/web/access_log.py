"""The web server's access log: one line per request, through the service's log handler, with the
client, the method and path, the status, the size and the time, and never the query string.

aiohttp's own access log writes the request line (`%r`) whole, query string and all; a query string
carries what someone searched for (a node, a namespace, a workload) and, from a careless client, a
token. The path names only what was asked for.
"""

from __future__ import annotations

import logging

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse


class PathAccessLogger(AbstractAccessLogger):
    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        self.logger.info('%s "%s %s" %s %s %.6f', request.remote or "-", request.method, request.path,
                         response.status, response.body_length, time)

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.INFO)
