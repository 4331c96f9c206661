"""What the long-running commands share at start: their logging, one-line configuration errors, and
waiting for Kafka, the database and the Kubernetes API server (`service.startup.wait_for`).

The probes only ask whether the dependency answers (a TCP connection to a Kafka bootstrap server or
the API server, a database connection); what the service then does with it reports its own errors.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

from service.config import ConfigError, ServiceSettings
from service.logs import configure_logging
from service.startup import StartupTimeout, wait_for
from xidpipe.commands.exits import Unavailable, UsageError

PROBE_TIMEOUT_S = 3.0


def config_error(exc: Exception) -> str:
    """A settings error as one line: pydantic's per-field errors joined, or the message."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc']) or exc.title}: {e['msg']}" for e in exc.errors()]
        return f"bad configuration ({exc.title}): " + "; ".join(parts)
    return f"bad configuration: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def load(cls: type[Any], **flags: Any) -> Any:
    """Settings of `cls` from the flags, the environment and the config file, or a one-line usage error.
    `flags` are the values given on the command line (None is a value: `--no-metrics`)."""
    from pydantic import ValidationError

    try:
        return cls(**flags)
    except (ValidationError, ConfigError) as exc:
        raise UsageError(config_error(exc)) from None


def start_logging(settings: ServiceSettings) -> None:
    try:
        configure_logging(settings.log_level, settings.log_format)
    except ValueError as exc:
        raise UsageError(f"bad configuration: {exc}") from None


def _tcp(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
        pass


def _hostport(address: str, default_port: int) -> tuple[str, int]:
    parsed = urlsplit(address if "//" in address else f"//{address}")
    return parsed.hostname or "localhost", parsed.port or default_port


def kafka_probe(bootstrap: str) -> None:
    """Connects to one of the bootstrap servers (the first that answers), or raises the last OSError."""
    last: OSError | None = None
    for server in (s.strip() for s in bootstrap.split(",") if s.strip()):
        try:
            _tcp(*_hostport(server, 9092))
            return
        except OSError as exc:
            last = exc
    raise last or OSError("no bootstrap server given")


def database_probe(url: str) -> None:
    """Opens and closes one connection; SQLite files are local and not probed."""
    if url.startswith("sqlite"):
        return
    import sqlalchemy as sa

    from history.engine import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    finally:
        engine.dispose()


def _database_down(exc: BaseException) -> bool:
    from sqlalchemy.exc import InterfaceError, OperationalError

    return isinstance(exc, OperationalError | InterfaceError | OSError)


def kube_probe(api: Any) -> None:
    """A TCP connection to the API server of a kubernetes `ApiClient`."""
    host = str(api.configuration.host)
    _tcp(*_hostport(host, 443 if host.startswith("https") else 80))


def wait_for_kafka(bootstrap: str, deadline_s: float) -> None:
    _wait(f"Kafka at {bootstrap}", lambda: kafka_probe(bootstrap), deadline_s)


def wait_for_database(url: str, deadline_s: float) -> None:
    from history.database import shown

    _wait(f"database {shown(url)}", lambda: database_probe(url), deadline_s, _database_down)


def wait_for_kube(api: Any, deadline_s: float) -> None:
    if api is not None:
        _wait(f"Kubernetes API server {api.configuration.host}", lambda: kube_probe(api), deadline_s)


def _wait(what: str, probe: Any, deadline_s: float, transient: Any = None) -> None:
    try:
        if transient is None:
            wait_for(what, probe, deadline_s)
        else:
            wait_for(what, probe, deadline_s, transient=transient)
    except StartupTimeout as exc:
        raise Unavailable(str(exc)) from None
