"""The `xidpipe` command line: one sub-command module per feature, registered below.

Every command ends with one of the exit statuses of `xidpipe.commands.exits` (0 ok, 1 findings,
2 usage or input, 3 a dependency unavailable, 4 refused), and an error is one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from xidpipe.commands.exits import EXIT_UNAVAILABLE, EXIT_USAGE, CliError
from xidpipe.commands.options import config_parent, database_parent, fill_defaults, suppress_defaults

# Each module exposes `register(subparsers) -> None` and sets `func` on its parsers.
COMMAND_MODULES: tuple[str, ...] = (
    "xidpipe.commands.parse",
    "xidpipe.commands.scan",
    "xidpipe.commands.demo",
    "xidpipe.commands.replay",
    "xidpipe.commands.dev",
    "xidpipe.commands.agent",
    "xidpipe.commands.worker",
    "xidpipe.commands.policy",
    "xidpipe.commands.node",
    "xidpipe.commands.remediation",
    "xidpipe.commands.breaker",
    "xidpipe.commands.silence",
    "xidpipe.commands.respond",
    "xidpipe.commands.incidents",
    "xidpipe.commands.gpus",
    "xidpipe.commands.db",
    "xidpipe.commands.serve",
    "xidpipe.commands.kafka",
    "xidpipe.commands.completion",
    "xidpipe.commands.config",
)

EPILOG = ("exit status: 0 ok, 1 findings (scan found faults, replay found incidents; a command that lists "
          "what it found exits 0), 2 usage or input error, 3 a dependency unavailable (database, Kafka, "
          "cluster, output), 4 refused by policy or by the circuit breaker")


def package_version() -> str:
    try:
        return version("xidpipe")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xidpipe", parents=[database_parent(), config_parent()], epilog=EPILOG,
        description="GPU fault incident pipeline: NVIDIA Xid faults to attributed, classified incidents.",
    )
    parser.add_argument("--version", action="version", version=f"xidpipe {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    suppress_defaults(parser)
    return parser


def _fail(args: argparse.Namespace | None, message: str, code: int) -> int:
    command = getattr(args, "command", None)
    prefix = f"xidpipe {command}" if command else "xidpipe"
    from xidpipe.commands.output import safe

    with contextlib.suppress(OSError):
        print(safe(f"{prefix}: {message}"), file=sys.stderr, flush=True)
    return code


def _dependency_error(exc: BaseException) -> str | None:
    """The one-line reason of a database error (the URL's password never in it), or None if not one."""
    try:
        from sqlalchemy.exc import DBAPIError
    except ImportError:  # pragma: no cover - SQLAlchemy is a dependency
        return None
    if isinstance(exc, DBAPIError):
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        return f"database unavailable: {reason}"
    return None


def _stdout_failed(args: argparse.Namespace, exc: OSError) -> int:
    # The output cannot be written (`> /dev/full`): say so once, and point standard output at /dev/null
    # so that what is still buffered in it does not fail again at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass
    return _fail(args, f"cannot write the output: {exc.strerror or exc}", EXIT_UNAVAILABLE)


def run(args: argparse.Namespace) -> int:
    from xidpipe.commands.output import terminal_safe

    try:
        with terminal_safe():  # text from nodes never reaches the terminal as control characters
            code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except CliError as exc:
        return _fail(args, str(exc), exc.code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`xidpipe parse big.log | head`): not an error of ours.
        sys.stderr.close()
        return 0
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            return _stdout_failed(args, exc)
        raise
    except Exception as exc:
        # Settings and start-up errors are one line already (their modules are loaded only by commands
        # that read settings, so the check does not import them).
        config, startup = sys.modules.get("service.config"), sys.modules.get("service.startup")
        if config is not None and isinstance(exc, config.ConfigError):
            return _fail(args, str(exc), EXIT_USAGE)
        if startup is not None and isinstance(exc, startup.StartupTimeout):
            return _fail(args, str(exc), EXIT_UNAVAILABLE)
        message = _dependency_error(exc)
        if message is None:
            raise
        return _fail(args, message, EXIT_UNAVAILABLE)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (see `xidpipe completion`)
        import argcomplete

        argcomplete.autocomplete(parser)
    try:
        args = fill_defaults(parser.parse_args(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    loaded = sys.modules.get("service.config")
    if loaded is not None:  # a file of an earlier call in this process no longer applies
        loaded.use_config_file(None)
    if args.config is not None or os.environ.get("XIDPIPE_CONFIG"):
        try:
            _use_config_file(args)
        except (OSError, ValueError) as exc:  # service.config.ConfigError is a ValueError
            return _fail(args, str(exc).splitlines()[0], EXIT_USAGE)
    return run(args)


def _use_config_file(args: argparse.Namespace) -> None:
    """Every settings object reads the file (the commands' own settings too: `cli_settings`); a file
    that is named and missing is refused before the command runs."""
    from service.config import CONFIG_ENV, ConfigError, config_file, use_config_file

    use_config_file(args.config)
    path = config_file()
    if path is not None and not path.is_file():
        raise ConfigError(f"no config file at {path} (--config or {CONFIG_ENV})")


if __name__ == "__main__":
    sys.exit(main())
