"""`xidpipe serve`'s settings (`service.config`: its own as `XIDPIPE_WEB_<NAME>`, the shared database as
`XIDPIPE_DATABASE_URL`); the command's flags override them."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from service.config import ServiceSettings, shared

DEFAULT_HOST = "127.0.0.1"  # local only unless asked: the pages and the API hold fleet data
DEFAULT_PORT = 8780
DEFAULT_METRICS_PORT = 9467  # beside the agent's 9464, the worker's 9465 and the responder's 9466


class ServeSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_WEB_")
    service = "web"

    database_url: str = shared("database_url", "sqlite:///var/xidpipe.db",
                               description="SQLAlchemy URL of the incident history (the worker's database)")
    host: str = Field(default=DEFAULT_HOST, description="address to bind; local only by default, since the pages "
                      "and the API hold fleet data")
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535, description="port (0: any free port)")
    tokens_file: Path | None = Field(
        default=None,
        description="the API tokens file (lines `name role token`); None: var/api-tokens, created once with a "
        "read and an operator token")
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="addresses or networks of the reverse proxies (an ingress) trusted for X-Forwarded-For, which "
        "names the client the login throttle counts, and X-Forwarded-Proto (the session cookie is Secure behind "
        "TLS); comma-separated in the environment. Empty: those headers are ignored, and every client behind a "
        "proxy is the proxy's address")
    auth_failures_per_minute: int = Field(
        default=10, ge=1, description="failed logins and bearer tokens a client may send in a minute; past that, "
        "each one that fails is a 429 (a right token is still served: tokens carry 128 bits)")
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="a client's time to send a request's headers, from connecting or from the "
        "end of the previous response; an idle keep-alive connection is closed after it too")
    body_timeout_s: float = Field(
        default=10.0, gt=0, description="a client's time to send a request's body (at most 64 KiB); a 408 past it")
    metrics_host: str = Field(default="127.0.0.1", description="address of /metrics and /healthz for Prometheus "
                              "(the chart binds the pod's IP); /metrics is not on the public port")
    metrics_port: int | None = Field(default=DEFAULT_METRICS_PORT, ge=0, le=65535,
                                     description="port of /metrics and /healthz; 0: any free port; None: off")

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item[:60]!r} is not an address or network (10.0.0.0/8, 192.0.2.7)") from None
        return value
