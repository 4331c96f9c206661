"""`xidpipe serve`'s settings (`service.config`: its own as `XIDPIPE_WEB_<NAME>`, the shared database as
`XIDPIPE_DATABASE_URL`); the command's flags override them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from service.config import ServiceSettings, shared

DEFAULT_HOST = "127.0.0.1"  # local only unless asked: the pages and the API hold fleet data
DEFAULT_PORT = 8780


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
