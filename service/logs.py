"""One logging setup for every xidpipe command: JSON lines for a machine, readable text for a person.

`configure_logging(level, fmt)` puts one handler on the root logger. Format `json` writes one object
per line (`time`, `level`, `logger`, `message`, then the context passed in `extra=`, then `exc` for
an exception); `text` writes `time LEVEL logger: message key=value ...`; `auto` (the default) is text
when stderr is a terminal and JSON otherwise, which is what a container's log collector reads.
`XIDPIPE_LOG_LEVEL` and `XIDPIPE_LOG_FORMAT` set both (`service.config.ServiceSettings`).

Every message, context value and traceback goes through `models.redact` first: a password in a
database URL, a bearer token or an API key in an error text is never written.

Libraries that install their own handlers (Faust and mode, through `logging.config.dictConfig`) are
given `logging_config()`, a dictConfig that installs this same handler.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any, Literal

from models.redact import redact

LogFormat = Literal["auto", "json", "text"]

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}
_LEVELS = {"warn": "WARNING", "crit": "CRITICAL", "fatal": "CRITICAL"}
# Libraries whose own logging is too loud at INFO for a service's log.
_QUIET = {"kafka": logging.CRITICAL, "aiokafka": logging.WARNING, "alembic": logging.WARNING}


def level_name(level: str | int) -> str:
    """A level as the logging module names it: `warn` → WARNING, `crit` → CRITICAL, `info` → INFO."""
    if isinstance(level, int):
        return logging.getLevelName(level)
    name = level.strip().lower()
    name = _LEVELS.get(name, name.upper())
    if name not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"log level {level!r}: use debug, info, warning, error or critical")
    return name


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, bool | int | float | type(None)):
        return value
    return redact(str(value))


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {k: _value(v) for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the `extra=` context, exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key, value in _context(record).items():
            out.setdefault(key, value)
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(out, separators=(",", ":"), ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message key=value ...`, for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).astimezone().strftime("%H:%M:%S.%f")[:-3]
        line = f"{when} {record.levelname:<7} {record.name}: {redact(record.getMessage())}"
        context = " ".join(f"{k}={v}" for k, v in _context(record).items())
        if context:
            line = f"{line}  {context}"
        if record.exc_info:
            line = f"{line}\n{redact(self.formatException(record.exc_info))}"
        return line


def resolve_format(fmt: str, stream: IO[str] | None = None) -> Literal["json", "text"]:
    """`auto`: text on a terminal, JSON otherwise."""
    if fmt in ("json", "text"):
        return fmt  # type: ignore[return-value]
    if fmt != "auto":
        raise ValueError(f"log format {fmt!r}: use json, text or auto")
    target = stream if stream is not None else sys.stderr
    try:
        return "text" if target.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def make_handler(fmt: str = "auto", stream: IO[str] | None = None) -> logging.Handler:
    """The xidpipe handler: stderr (or `stream`) in the chosen format."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if resolve_format(fmt, stream) == "json" else TextFormatter())
    handler.set_name("xidpipe")
    return handler


def configure_logging(level: str | int = "info", fmt: str = "auto", stream: IO[str] | None = None) -> logging.Handler:
    """Route every logger through one xidpipe handler on the root logger; returns it."""
    handler = make_handler(fmt, stream)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_name(level))
    for name, quiet in _QUIET.items():
        logging.getLogger(name).setLevel(quiet)
    logging.captureWarnings(True)
    return handler


def logging_config(level: str | int = "info", fmt: str = "auto") -> dict[str, Any]:
    """A `logging.config.dictConfig` that installs the xidpipe handler (for Faust's and mode's worker,
    which configure logging themselves); existing loggers are kept."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"xidpipe": {"()": "service.logs.make_handler", "fmt": resolve_format(fmt)}},
        "root": {"level": level_name(level), "handlers": ["xidpipe"]},
        "loggers": {name: {"level": logging.getLevelName(quiet)} for name, quiet in _QUIET.items()},
    }
