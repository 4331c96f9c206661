"""What the command line's own commands read from the settings (`service.config`): the database.

`xidpipe incidents`, `gpus`, `db` and `silence` read the incident history in it, `xidpipe node` and
`xidpipe breaker` record actions in it. Their `--database-url` flag comes first, then this model
(`XIDPIPE_DATABASE_URL`, then `database_url` in the config file); unset, the history commands read the
SQLite file `make demo` writes and the action commands the JSON Lines action log.
"""

from __future__ import annotations

import argparse

from pydantic import SecretStr
from pydantic_settings import SettingsConfigDict

from history.database import DEFAULT_DB
from service.config import XidpipeSettings, shared


class CliSettings(XidpipeSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_CLI_")
    service = "cli"

    database_url: SecretStr | None = shared(
        "database_url", None,
        description=f"SQLAlchemy URL of the database the history commands read and `node` and `breaker` record "
        f"actions in (none: the history commands read {DEFAULT_DB}, what `make demo` writes; the action "
        "commands the JSON Lines action log); `--database-url` overrides it")


def configured_database(args: argparse.Namespace) -> str | None:
    """The database the command was given: its `--database-url`, else the settings' (None: none)."""
    if getattr(args, "database_url", None):
        return str(args.database_url)
    from xidpipe.commands.startup import load

    url = load(CliSettings).database_url
    return url.get_secret_value() if url is not None else None


def history_database(args: argparse.Namespace) -> str:
    """The database of the incident history: the one configured, else the demo's SQLite file."""
    return configured_database(args) or DEFAULT_DB
